// plan_cooperative_load: who reads which bytes of the checkpoint and who
// sends which to whom (cooperative_load.hpp). Arithmetic on the shard
// plans: each byte of the union given one reader, then each rank's needs
// as pieces, intersected with every reader's part.
#include <ballast/cooperative_load.hpp>

#include "dist/pieces.hpp"

#include <algorithm>

namespace ballast {

namespace {

// Who reads each byte a storage domain's ranks need (every byte by one
// rank of the domain; `members`, ascending):
//  - a split weight's contiguous shards: the rank that holds each, so those
//    bytes never cross the network;
//  - a replicated weight, or an inner-axis (strided) split: one equal
//    stretch of the weight per member, sent on to the members that need
//    them (reading a strided shard alone would be one small read per row;
//    a domain without every rank reads a strided weight whole, the other
//    domains' columns too: fewer, larger reads);
//  - bytes two weights share: the first assignment, in file order.
// Per rank, per mapping: sorted, non-overlapping, touching ranges joined
// (only the members' entries are filled).
void assign_readers(const Model& model, const ShardPlans& plans, const std::vector<std::uint32_t>& members,
                    std::vector<std::vector<ReadPlanFile>>& keep) {
  const auto world = static_cast<std::uint32_t>(plans.ranks.size());
  const auto size = static_cast<std::uint32_t>(members.size());
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
      for (std::uint32_t r : members)
        for (const ByteRange& range : plans.ranks[r].weights[i].ranges)
          if (range.length != 0) candidates.push_back({where->mapping, range.offset, range.length, r});
      continue;
    }
    const std::uint64_t share = where->length / size, extra = where->length % size;
    std::uint64_t at = where->offset;
    for (std::uint32_t k = 0; k < size; ++k) {
      const std::uint64_t n = share + (k < extra ? 1 : 0);
      if (n != 0) candidates.push_back({where->mapping, at, n, members[k]});
      at += n;
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.mapping != b.mapping ? a.mapping < b.mapping : a.offset < b.offset;
  });
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
}

}  // namespace

Result<CooperativeLoadPlan> plan_cooperative_load(const Model& model, const ShardPlans& plans,
                                                  std::uint32_t ranks_per_domain) {
  const auto world = static_cast<std::uint32_t>(plans.ranks.size());
  if (world == 0) return make_error(ErrorCode::invalid_argument, "planning a cooperative load: the shard plans have no rank");
  for (std::uint32_t r = 0; r < world; ++r)
    if (plans.ranks[r].rank != r || plans.ranks[r].world != world || plans.ranks[r].weights.size() != plans.ranks[0].weights.size())
      return make_error(ErrorCode::invalid_argument,
                        "planning a cooperative load: shard plan " + std::to_string(r) +
                            " is not rank " + std::to_string(r) + " of the same world (use plan_shards_all)");
  CooperativeLoadPlan out;
  out.world = world;
  // Storage domains: ranks r / ranks_per_domain read together (0: all).
  const std::uint32_t per = ranks_per_domain == 0 || ranks_per_domain > world ? world : ranks_per_domain;
  out.domains = (world + per - 1) / per;
  // The union: every weight's referenced bytes, each once (the shards of a
  // weight cover it exactly, so this is what the ranks need together).
  std::vector<ValueId> ids;
  ids.reserve(plans.ranks[0].weights.size());
  for (const WeightShard& s : plans.ranks[0].weights)
    if (s.mapping) ids.push_back(s.id);
  const ReadPlan whole = ReadPlan::of(model.store(), ids);
  out.read_per_rank_bytes = plans.read_bytes_sum;
  out.read_everything_bytes = plans.union_bytes * world;
  std::vector<std::vector<ReadPlanFile>> keep(world);
  for (std::uint32_t d = 0; d < out.domains; ++d) {
    std::vector<std::uint32_t> members;
    for (std::uint32_t r = d * per; r < world && r < (d + 1) * per; ++r) members.push_back(r);
    assign_readers(model, plans, members, keep);
  }
  out.reads.reserve(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    out.reads.push_back(whole.only(keep[r]));
    out.union_bytes += out.reads.back().bytes();
  }
  // One domain reads the union exactly (checked); several read each their own.
  if (out.domains == 1 && out.union_bytes != whole.bytes())
    return make_error(ErrorCode::internal, "planning a cooperative load: the ranks' reads add up to " +
                                               std::to_string(out.union_bytes) + " bytes, not the union's " +
                                               std::to_string(whole.bytes()));

  out.ranks.resize(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    out.ranks[r].rank = r;
    out.ranks[r].domain = r / per;
    out.ranks[r].read_bytes = out.reads[r].bytes();
  }
  for (std::uint32_t q = 0; q < world; ++q) {
    CooperativeRankPlan& receiver = out.ranks[q];
    const ShardPlan& plan = plans.ranks[q];
    receiver.shard_bytes = plan.totals.device_bytes;
    const dist::RankPieces pieces = dist::pieces_of(plan);
    for (std::uint32_t i : pieces.inline_shards) receiver.inline_bytes += plan.weights[i].device_bytes;
    for (std::uint32_t p = 0; p < world; ++p) {
      if (out.ranks[p].domain != receiver.domain) continue;  // bytes cross no domain
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
    }
    // Every piece lies in its domain's reads, and the readers' parts cover
    // them once: a rank's shards are exactly what it keeps, receives and copies.
    if (receiver.kept_bytes + receiver.received_bytes + receiver.inline_bytes != receiver.shard_bytes)
      return make_error(ErrorCode::internal,
                        "planning a cooperative load: rank " + std::to_string(q) + " would get " +
                            std::to_string(receiver.kept_bytes + receiver.received_bytes + receiver.inline_bytes) +
                            " bytes of its " + std::to_string(receiver.shard_bytes) + " bytes of shards");
  }
  return out;
}

}  // namespace ballast
