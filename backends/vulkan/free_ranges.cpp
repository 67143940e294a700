#include "free_ranges.hpp"

namespace ballast::vulkan {

FreeRanges::FreeRanges(std::uint64_t size) : size_(size) {
  if (size != 0) insert(0, size);
}

void FreeRanges::insert(std::uint64_t offset, std::uint64_t size) {
  by_offset_.emplace(offset, size);
  by_size_.emplace(size, offset);
  free_bytes_ += size;
}

void FreeRanges::erase(std::map<std::uint64_t, std::uint64_t>::iterator it) {
  by_size_.erase({it->second, it->first});
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

std::optional<std::uint64_t> FreeRanges::take(std::uint64_t size, std::uint64_t alignment, std::uint64_t base) {
  // Ranges are visited smallest first. Aligning a start that is a multiple
  // of 4 skips at most alignment - 4 bytes, so the first range at least
  // size + alignment - 4 long always fits and the scan stops there.
  for (auto it = by_size_.lower_bound({size, 0}); it != by_size_.end(); ++it) {
    const auto [length, offset] = *it;
    const std::uint64_t address = base + offset;
    const std::uint64_t skip = ((address + alignment - 1) & ~(alignment - 1)) - address;
    if (skip > length || length - skip < size) continue;
    erase(by_offset_.find(offset));
    if (skip != 0) insert(offset, skip);
    if (length - skip > size) insert(offset + skip + size, length - skip - size);
    return offset + skip;
  }
  return std::nullopt;
}

void FreeRanges::give_back(std::uint64_t offset, std::uint64_t size) {
  std::uint64_t start = offset;
  std::uint64_t end = offset + size;
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first == end) {
    end += next->second;
    auto after = std::next(next);
    erase(next);
    next = after;
  }
  if (next != by_offset_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == start) {
      start = previous->first;
      erase(previous);
    }
  }
  insert(start, end - start);
}

}  // namespace ballast::vulkan
