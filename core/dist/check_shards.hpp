// Whether a rank's shards (cooperative_load's or shards_in_place's) are
// the ones a shard plan describes, and the one way to read them. What
// place_rank, share_row_maxima and rank_model take on trust otherwise:
// with even splits every rank's sizes match, so the rank is checked too,
// and a shard said to be in place must be the whole model's own bytes.
#pragma once

#include <ballast/cooperative_load.hpp>

#include <functional>

namespace ballast::dist {

// invalid_argument (another rank's, another count, a shard in place that
// is not its weight's own bytes), size_mismatch (a shard of other bytes,
// naming its weight).
Status check_shards(const Model& whole, const ShardPlan& rank, const RankShards& shards);

// Where a one-range shard lies in its weight's raw bytes.
struct InPlaceRange {
  const WeightRef* weight = nullptr;  // the whole model's
  std::uint64_t offset = 0;           // in the weight's bytes (not the file's)
  std::uint64_t length = 0;
};
// not_found (no such weight, its file unmapped), invalid_argument (not one
// range), out_of_bounds (a range outside the weight).
Result<InPlaceRange> in_place_range(const Model& whole, const WeightShard& shard);

// Hands `sink` the bytes of shards.shards[i]: an in-place one through the
// whole model's store (WeightStore::transfer: checked, and a file cut
// meanwhile is an io error, not SIGBUS), any other as it is held.
Status read_shard(const Model& whole, const ShardPlan& rank, const RankShards& shards, std::size_t i,
                  const std::function<Status(Bytes)>& sink);

}  // namespace ballast::dist
