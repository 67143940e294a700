#include "memo/hit_counters.hpp"

#include <bit>

namespace ballast::memo {
namespace {

// Bit i set: stripe i is leased to a live thread. The acquire on claiming
// and release on returning order the previous owner's counts before the
// next owner's load+store.
std::atomic<std::uint64_t> leased{0};
static_assert(HitCounters::kOwned == 64, "one lease bit per owned stripe");

std::size_t claim() noexcept {
  std::uint64_t now = leased.load(std::memory_order_relaxed);
  while (now != ~std::uint64_t{0}) {
    const int bit = std::countr_one(now);
    if (leased.compare_exchange_weak(now, now | (std::uint64_t{1} << bit), std::memory_order_acquire,
                                     std::memory_order_relaxed))
      return static_cast<std::size_t>(bit);
  }
  return HitCounters::kOwned;
}

struct Lease {
  std::size_t stripe = claim();
  ~Lease() {
    if (stripe < HitCounters::kOwned) leased.fetch_and(~(std::uint64_t{1} << stripe), std::memory_order_release);
  }
};

}  // namespace

std::size_t HitCounters::this_thread_stripe() noexcept {
  thread_local const Lease lease;
  return lease.stripe;
}

}  // namespace ballast::memo
