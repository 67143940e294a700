// The free byte ranges of one memory block, and how allocations are
// placed in them.
//
// Pure bookkeeping (no Vulkan), so the placement rules can be tested alone.
// Every offset and size is a multiple of 4: kernels store whole 32-bit
// words, and a word shared by two allocations could be overwritten by a
// kernel writing the other. Placement is best fit by size (the smallest
// free range that holds the request once aligned), which keeps large free
// ranges whole for large requests; freed ranges merge with free
// neighbours at once, so a block whose allocations are all freed is one
// free range again.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace ballast::vulkan {

class FreeRanges {
 public:
  // A block of `size` bytes (a multiple of 4), all free.
  explicit FreeRanges(std::uint64_t size);

  // Takes `size` bytes (a multiple of 4) at an offset whose address
  // `base + offset` is a multiple of `alignment` (a power of two, at least
  // 4; `base` a multiple of 4); nullopt when no free range holds them.
  // Bytes skipped to align the start stay free.
  std::optional<std::uint64_t> take(std::uint64_t size, std::uint64_t alignment, std::uint64_t base);
  // Gives back a range `take` returned, merging it with free neighbours.
  void give_back(std::uint64_t offset, std::uint64_t size);

  bool all_free() const { return by_offset_.size() == 1 && by_offset_.begin()->second == size_; }
  std::uint64_t largest_free() const { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  std::uint64_t free_bytes() const { return free_bytes_; }
  std::size_t free_range_count() const { return by_offset_.size(); }
  std::uint64_t size() const { return size_; }

 private:
  void insert(std::uint64_t offset, std::uint64_t size);
  void erase(std::map<std::uint64_t, std::uint64_t>::iterator it);

  std::uint64_t size_;
  std::uint64_t free_bytes_ = 0;
  std::map<std::uint64_t, std::uint64_t> by_offset_;         // offset -> size, for merging neighbours
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // (size, offset), for best fit
};

}  // namespace ballast::vulkan
