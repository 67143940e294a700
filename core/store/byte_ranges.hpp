// Interval arithmetic on byte ranges: the union of what weights reference
// and its complement inside a file (the dead weight).
#pragma once

#include <ballast/weight_store.hpp>

#include <cstdint>
#include <vector>

namespace ballast::store {

// Sorted, merged, non-overlapping ranges clipped to [0, limit); empty
// ranges are dropped. Adjacent ranges are merged too.
std::vector<ByteRange> merge_ranges(std::vector<ByteRange> ranges, std::uint64_t limit);

// The parts of [0, limit) covered by none of `merged` (which must be the
// output of merge_ranges).
std::vector<ByteRange> complement_ranges(const std::vector<ByteRange>& merged, std::uint64_t limit);

std::uint64_t total_length(const std::vector<ByteRange>& ranges);

// True when [offset, offset + length) lies inside [0, size), computed
// without overflow.
constexpr bool range_inside(std::uint64_t offset, std::uint64_t length, std::uint64_t size) noexcept {
  return offset <= size && length <= size - offset;
}

}  // namespace ballast::store
