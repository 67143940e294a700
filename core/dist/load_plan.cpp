// plan_cooperative_load: who reads which bytes of the checkpoint and who
// sends which to whom (cooperative_load.hpp). Arithmetic on the shard
// plans: each rank's needs as pieces, intersected with every reader's
// portion of the union.
#include <ballast/cooperative_load.hpp>

#include "dist/pieces.hpp"

namespace ballast {

Result<CooperativeLoadPlan> plan_cooperative_load(const Model& model, const ShardPlans& plans) {
  const auto world = static_cast<std::uint32_t>(plans.ranks.size());
  if (world == 0) return make_error(ErrorCode::invalid_argument, "planning a cooperative load: the shard plans have no rank");
  for (std::uint32_t r = 0; r < world; ++r)
    if (plans.ranks[r].rank != r || plans.ranks[r].world != world || plans.ranks[r].weights.size() != plans.ranks[0].weights.size())
      return make_error(ErrorCode::invalid_argument,
                        "planning a cooperative load: shard plan " + std::to_string(r) +
                            " is not rank " + std::to_string(r) + " of the same world (use plan_shards_all)");
  CooperativeLoadPlan out;
  out.world = world;
  // The union: every weight's referenced bytes, each once (the shards of a
  // weight cover it exactly, so this is what the ranks need together).
  std::vector<ValueId> ids;
  ids.reserve(plans.ranks[0].weights.size());
  for (const WeightShard& s : plans.ranks[0].weights)
    if (s.mapping) ids.push_back(s.id);
  const ReadPlan whole = ReadPlan::of(model.store(), ids);
  out.union_bytes = whole.bytes();
  out.read_per_rank_bytes = plans.read_bytes_sum;
  out.read_everything_bytes = plans.union_bytes * world;
  out.reads.reserve(world);
  for (std::uint32_t r = 0; r < world; ++r) out.reads.push_back(whole.portion(r, world));

  out.ranks.resize(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    out.ranks[r].rank = r;
    out.ranks[r].read_bytes = out.reads[r].bytes();
  }
  for (std::uint32_t q = 0; q < world; ++q) {
    CooperativeRankPlan& receiver = out.ranks[q];
    const ShardPlan& plan = plans.ranks[q];
    receiver.shard_bytes = plan.totals.device_bytes;
    const dist::RankPieces pieces = dist::pieces_of(plan);
    for (std::uint32_t i : pieces.inline_shards) receiver.inline_bytes += plan.weights[i].device_bytes;
    for (std::uint32_t p = 0; p < world; ++p)
      for (const ReadPlanFile& f : out.reads[p].files()) {
        const auto file = pieces.files.find(f.mapping);
        if (file == pieces.files.end()) continue;
        for (const ReadRange& range : f.ranges) {
          const std::uint64_t bytes = dist::bytes_in(file->second, range.offset, range.offset + range.length);
          if (p == q) {
            receiver.kept_bytes += bytes;
          } else {
            receiver.received_bytes += bytes;
            out.ranks[p].sent_bytes += bytes;
          }
        }
      }
    // Every piece lies in the union, and the portions cover it once: a
    // rank's shards are exactly what it keeps, receives and copies.
    if (receiver.kept_bytes + receiver.received_bytes + receiver.inline_bytes != receiver.shard_bytes)
      return make_error(ErrorCode::internal,
                        "planning a cooperative load: rank " + std::to_string(q) + " would get " +
                            std::to_string(receiver.kept_bytes + receiver.received_bytes + receiver.inline_bytes) +
                            " bytes of its " + std::to_string(receiver.shard_bytes) + " bytes of shards");
  }
  return out;
}

}  // namespace ballast
