// The device blocks paged residency has evicted but not given back to the
// backend, kept for the next page-in or build of the same size.
//
// Why: a paged decode loop evicts and pages in the same shapes every token.
// Handing an evicted block straight to the next value of its size skips the
// backend's allocation and, on the CPU backend above all, the first-touch
// page faults a fresh block pays on every page (large blocks come from the
// kernel untouched and go back to it on free), which halve a warm page-in's
// rate. On GPUs it skips the driver's allocator and the Vulkan
// sub-allocator's search.
//
// A class is an exact (bytes, alignment): a decode loop's weights repeat a
// few sizes exactly, and rounding up would spend budget on padding and make
// the budget's count differ from the entries' own bytes.
//
// Not thread-safe: Residency uses it with its lock held. Its bytes count
// in Residency's `held` (the budget), so pooled plus live bytes never exceed
// the budget; Residency releases pooled blocks to the backend, oldest
// first, before it evicts any entry for room (loading.cpp).
#pragma once

#include <ballast/derivation.hpp>

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace ballast::residency {

struct Block {
  DevicePtr ptr = 0;
  std::uint64_t bytes = 0;
  std::uint64_t alignment = 0;
};

class BlockPool {
 public:
  // A block of exactly this class, removed from the pool; nullopt when none.
  std::optional<Block> take(std::uint64_t bytes, std::uint64_t alignment);
  // Keeps `b` (the newest). May throw std::bad_alloc, leaving the pool as it was.
  void put(const Block& b);
  // The block kept longest, removed; nullopt when empty.
  std::optional<Block> take_oldest();
  // Every block, oldest first; the pool is empty afterwards.
  std::vector<Block> take_all();

  bool empty() const noexcept { return order_.empty(); }
  std::size_t blocks() const noexcept { return order_.size(); }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  using Order = std::list<Block>;
  using Key = std::pair<std::uint64_t, std::uint64_t>;  // (bytes, alignment)
  Order order_;                                 // oldest first
  std::multimap<Key, Order::iterator> by_class_;  // within a class, oldest first
  std::uint64_t bytes_ = 0;
};

}  // namespace ballast::residency
