// Cutting a resolved weight for one rank (slice.hpp). The geometry was
// checked when it was resolved: every part splits evenly, so this is
// arithmetic that cannot fail or overflow (every offset lies inside the
// weight, whose bytes lie inside its mapping).
#include "shard/slice.hpp"

namespace ballast::shard {

WeightShard slice(const ResolvedWeight& w, std::uint32_t world, std::uint32_t rank) {
  WeightShard s;
  s.weight = w.name;
  s.id = w.id;
  s.split = w.split;
  s.rule = w.rule;
  s.layout = w.layout;
  s.mapping = w.mapping;
  // World 1 keeps every weight whole (one range), whatever its split.
  if (w.split == ShardSplit::replicated || world == 1) {
    s.axis = world == 1 ? w.axis : -1;
    s.dims = w.rank_dims;  // at world 1, the whole weight's
    s.device_bytes = w.length;
    s.ranges.push_back({w.base, w.length});
    if (world == 1 && w.split != ShardSplit::replicated) s.parts = static_cast<std::uint32_t>(w.part_units.size());
    return s;
  }
  s.axis = w.axis;
  s.parts = static_cast<std::uint32_t>(w.part_units.size());
  s.dims = w.rank_dims;
  s.device_bytes = w.rank_bytes;
  std::uint64_t part_start = 0;  // in units along the axis
  for (std::uint64_t units : w.part_units) {
    const std::uint64_t per_rank = units / world;
    const std::uint64_t offset = w.base + (part_start + per_rank * rank) * w.inner_bytes;
    if (w.outer == 1) s.ranges.push_back({offset, per_rank * w.inner_bytes});
    else s.strided.push_back({offset, per_rank * w.inner_bytes, w.axis_units * w.inner_bytes, w.outer});
    part_start += units;
  }
  return s;
}

}  // namespace ballast::shard
