// A weight's split, resolved once for every rank: the rule that matched,
// the layout, and the byte geometry the split cuts (slice.hpp cuts it per
// rank). Every refusal happens here, so a plan for one rank and the plans
// for all ranks refuse the same weights with the same words.
#pragma once

#include <ballast/shard.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ballast::shard {

// The weight's bytes seen as [outer, axis_units, inner_bytes] around the
// split axis: `outer` runs (the product of the dims before it) of
// `axis_units` storage units (elements, blocks, packed bytes) of
// `inner_bytes` bytes each. outer == 1: a rank's slice is a byte range;
// otherwise a strided view.
struct ResolvedWeight {
  ValueId id{};
  std::string name;
  ShardSplit split = ShardSplit::replicated;
  std::string rule;
  std::string layout;
  int axis = -1;
  std::uint64_t outer = 1;
  std::uint64_t axis_units = 0;
  std::uint64_t inner_bytes = 0;
  std::vector<std::uint64_t> part_units;  // each part along the axis, in storage units
  Dims rank_dims;                         // every rank's shard dims (splits are even)
  std::uint64_t rank_bytes = 0;           // every rank's shard bytes
  std::optional<MappingId> mapping;
  std::uint64_t base = 0;    // the weight's first byte in the mapping (0 inline)
  std::uint64_t length = 0;  // the weight's bytes
};

// Every weight of the model, in weight order. `world` is checked by the
// caller. `unmatched`, when given, receives the names of the rules that
// decide no weight's split (in rule order): no name matches them before
// an earlier rule, or only scales and zero points do (which follow their B).
Result<std::vector<ResolvedWeight>> resolve_shards(const Model& model, const std::vector<ShardRule>& rules,
                                                   std::uint32_t world, std::vector<std::string>* unmatched = nullptr);

}  // namespace ballast::shard
