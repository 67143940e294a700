#include "dist/check_shards.hpp"

namespace ballast::dist {

Status check_shards(const ShardPlan& rank, const RankShards& shards) {
  if (shards.report.rank != rank.rank)
    return make_error(ErrorCode::invalid_argument, "the shards of rank " + std::to_string(shards.report.rank) +
                                                       " given with the plan of rank " + std::to_string(rank.rank));
  if (shards.shards.size() != rank.weights.size())
    return make_error(ErrorCode::invalid_argument, "the rank's shards are not its plan's (" +
                                                       std::to_string(shards.shards.size()) + " arrays for " +
                                                       std::to_string(rank.weights.size()) + " weights)");
  for (std::size_t i = 0; i < rank.weights.size(); ++i)
    if (shards.shards[i].size() != rank.weights[i].device_bytes)
      return make_error(ErrorCode::size_mismatch, "the shard of '" + rank.weights[i].weight + "' holds " +
                                                      std::to_string(shards.shards[i].size()) + " bytes, its plan " +
                                                      std::to_string(rank.weights[i].device_bytes));
  return {};
}

}  // namespace ballast::dist
