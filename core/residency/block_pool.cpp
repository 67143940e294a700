#include "residency/block_pool.hpp"

namespace ballast::residency {

std::optional<Block> BlockPool::take(std::uint64_t bytes, std::uint64_t alignment) {
  auto it = by_class_.find({bytes, alignment});
  if (it == by_class_.end()) return std::nullopt;
  const Block b = *it->second;
  order_.erase(it->second);
  by_class_.erase(it);
  bytes_ -= b.bytes;
  return b;
}

void BlockPool::put(const Block& b) {
  order_.push_back(b);
  try {
    by_class_.emplace(Key{b.bytes, b.alignment}, std::prev(order_.end()));
  } catch (...) {
    order_.pop_back();
    throw;
  }
  bytes_ += b.bytes;
}

std::optional<Block> BlockPool::take_oldest() {
  if (order_.empty()) return std::nullopt;
  const Order::iterator oldest = order_.begin();
  // The oldest of the pool is the oldest of its class: the first of its key.
  auto [first, last] = by_class_.equal_range({oldest->bytes, oldest->alignment});
  for (auto it = first; it != last; ++it)
    if (it->second == oldest) {
      by_class_.erase(it);
      break;
    }
  const Block b = *oldest;
  order_.erase(oldest);
  bytes_ -= b.bytes;
  return b;
}

std::vector<Block> BlockPool::take_all() {
  std::vector<Block> out(order_.begin(), order_.end());
  order_.clear();
  by_class_.clear();
  bytes_ = 0;
  return out;
}

}  // namespace ballast::residency
