// Where a shard plan's byte offsets count from, for the weight a shard
// describes: the weight's first byte in its mapping for a weight in a data
// file (offsets in the file; WeightShard::mapping names it), 0 for one
// inline in the model file (offsets in the weight's own bytes). Every
// reader of a plan's ranges and views (gather_launch, dist's in-place
// ranges and host gathers) counts from here, so the rule is written once.
#pragma once

#include <ballast/shard.hpp>

#include <optional>

namespace ballast::shard {

struct ShardSource {
  const WeightRef* weight = nullptr;  // the model's own
  std::uint64_t base = 0;             // subtract from a plan offset to get one in the weight's bytes
  std::optional<MappingId> mapping;   // the weight's file; nullopt inline
};

// not_found: the model has no weight of the shard's id, or the weight's
// file is not mapped.
Result<ShardSource> shard_source(const Model& model, const WeightShard& shard);

}  // namespace ballast::shard
