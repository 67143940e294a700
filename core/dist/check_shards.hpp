// Whether a rank's shards (cooperative_load's) are the ones a shard plan
// describes: the same rank, one array per weight, each of its device bytes.
// What place_rank and rank_model take on trust otherwise: with even splits
// every rank's sizes match, so the rank is checked too.
#pragma once

#include <ballast/cooperative_load.hpp>

namespace ballast::dist {

// invalid_argument (another rank's, or another count), size_mismatch
// (a shard of other bytes, naming its weight).
Status check_shards(const ShardPlan& rank, const RankShards& shards);

}  // namespace ballast::dist
