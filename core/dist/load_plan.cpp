// plan_cooperative_load: who reads which bytes of the checkpoint and who
// sends which to whom (cooperative_load.hpp). Arithmetic on the shard
// plans: each byte of the union given one reader, then each rank's needs
// as pieces, intersected with every reader's part.
#include <ballast/cooperative_load.hpp>

#include "dist/pieces.hpp"

#include <algorithm>

namespace ballast {

namespace {

// Who reads each byte of the union (every byte by one rank):
//  - a split weight's contiguous shards: the rank that holds each, so those
//    bytes never cross the network;
//  - a replicated weight, or an inner-axis (strided) split: `world` equal
//    stretches of the weight, one per rank, sent on to the ranks that need
//    them (reading a strided shard alone would be one small read per row);
//  - bytes two weights share: the first assignment, in file order.
// Per rank, per mapping: sorted, non-overlapping, touching ranges joined.
std::vector<std::vector<ReadPlanFile>> assign_readers(const Model& model, const ShardPlans& plans) {
  const auto world = static_cast<std::uint32_t>(plans.ranks.size());
  struct Candidate {
    MappingId mapping;
    std::uint64_t offset, length;
    std::uint32_t reader;
  };
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < plans.ranks[0].weights.size(); ++i) {
    const WeightShard& first = plans.ranks[0].weights[i];
    if (!first.mapping) continue;  // inline: copied from each rank's model
    const auto ref = model.store().weights().find(first.id);
    if (ref == model.store().weights().end()) continue;
    const auto where = model.store().external_mmap_provenance(ref->second);
    if (!where || where->length == 0) continue;
    if (world > 1 && first.split != ShardSplit::replicated && first.contiguous()) {
      for (std::uint32_t r = 0; r < world; ++r)
        for (const ByteRange& range : plans.ranks[r].weights[i].ranges)
          if (range.length != 0) candidates.push_back({where->mapping, range.offset, range.length, r});
      continue;
    }
    const std::uint64_t share = where->length / world, extra = where->length % world;
    std::uint64_t at = where->offset;
    for (std::uint32_t r = 0; r < world; ++r) {
      const std::uint64_t n = share + (r < extra ? 1 : 0);
      if (n != 0) candidates.push_back({where->mapping, at, n, r});
      at += n;
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.mapping != b.mapping ? a.mapping < b.mapping : a.offset < b.offset;
  });
  std::vector<std::vector<ReadPlanFile>> keep(world);
  MappingId mapping = 0;
  std::uint64_t covered = 0;  // in `mapping`: bytes before this are assigned
  bool started = false;
  for (const Candidate& c : candidates) {
    if (!started || c.mapping != mapping) {
      mapping = c.mapping;
      covered = 0;
      started = true;
    }
    const std::uint64_t lo = std::max(c.offset, covered), hi = c.offset + c.length;
    if (lo >= hi) continue;
    covered = hi;
    std::vector<ReadPlanFile>& files = keep[c.reader];
    if (files.empty() || files.back().mapping != c.mapping) files.push_back({c.mapping, {}, 0, 0, {}});
    std::vector<ReadRange>& ranges = files.back().ranges;
    if (!ranges.empty() && ranges.back().offset + ranges.back().length == lo)
      ranges.back().length += hi - lo;
    else
      ranges.push_back({lo, hi - lo});
  }
  return keep;
}

}  // namespace

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
  const std::vector<std::vector<ReadPlanFile>> keep = assign_readers(model, plans);
  out.reads.reserve(world);
  std::uint64_t assigned = 0;
  for (std::uint32_t r = 0; r < world; ++r) {
    out.reads.push_back(whole.only(keep[r]));
    assigned += out.reads.back().bytes();
  }
  if (assigned != out.union_bytes)
    return make_error(ErrorCode::internal, "planning a cooperative load: the ranks' reads add up to " +
                                               std::to_string(assigned) + " bytes, not the union's " +
                                               std::to_string(out.union_bytes));

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
    // Every piece lies in the union, and the readers' parts cover it once: a
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
