// One rank's slice of a resolved weight: byte ranges (an outer-axis split,
// zero-copy) or strided views (an inner-axis split, gathered later).
#pragma once

#include "shard/resolve.hpp"

namespace ballast::shard {

WeightShard slice(const ResolvedWeight& weight, std::uint32_t world, std::uint32_t rank);

}  // namespace ballast::shard
