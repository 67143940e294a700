// HitCounters: hit and miss counts that cost a hit no contended write.
//
// Every thread leases a stripe (its own cache line) for its lifetime and
// bumps it with a plain load+store, which is exact because no other thread
// writes that stripe. Leases go back when a thread exits, so a process that
// keeps creating threads reuses them; threads beyond kOwned at once share
// one overflow stripe with atomic increments (still exact, only slower).
#pragma once

#include <ballast/derived_weights.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ballast::memo {

class HitCounters {
 public:
  static constexpr std::size_t kOwned = 64;

  void hit() noexcept { bump(this_thread_stripe(), &Stripe::hits); }
  void miss() noexcept { bump(this_thread_stripe(), &Stripe::misses); }

  void add_to(DerivedWeightsStats& out) const noexcept {
    for (const Stripe& s : stripes_) {
      out.hits += s.hits.load(std::memory_order_relaxed);
      out.misses += s.misses.load(std::memory_order_relaxed);
    }
  }

  // This thread's stripe: below kOwned its own, kOwned the shared one.
  static std::size_t this_thread_stripe() noexcept;

 private:
  struct alignas(64) Stripe {
    std::atomic<std::uint64_t> hits{0};
    std::atomic<std::uint64_t> misses{0};
  };

  void bump(std::size_t stripe, std::atomic<std::uint64_t> Stripe::*field) noexcept {
    std::atomic<std::uint64_t>& counter = stripes_[stripe].*field;
    if (stripe == kOwned)
      counter.fetch_add(1, std::memory_order_relaxed);
    else
      counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  std::array<Stripe, kOwned + 1> stripes_;
};

}  // namespace ballast::memo
