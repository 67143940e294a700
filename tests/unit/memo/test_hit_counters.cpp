// The memo's hit and miss counters (memo/hit_counters.hpp): a thread leases
// one of kOwned stripes for its lifetime, threads beyond them share one.
#include "memo/hit_counters.hpp"

#include <doctest/doctest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

using ballast::memo::HitCounters;

TEST_CASE("a thread on the shared stripe hands back no owned stripe when it ends") {
  // The stripe a new thread is given (it ends, and hands it back, before this returns).
  const auto stripe_of_a_new_thread = [] {
    std::size_t s = 0;
    std::thread([&] { s = HitCounters::this_thread_stripe(); }).join();
    return s;
  };
  // Hold every owned stripe: threads take one each and wait, until one is
  // given the shared stripe (and ends at once).
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::vector<std::thread> holders;
  for (std::size_t got = 0; got != HitCounters::kOwned;) {
    REQUIRE(holders.size() <= HitCounters::kOwned + 8);  // at most this process's other threads' stripes more
    std::promise<std::size_t> given;
    std::future<std::size_t> stripe = given.get_future();
    holders.emplace_back([&, given = std::move(given)]() mutable {
      const std::size_t s = HitCounters::this_thread_stripe();
      given.set_value(s);
      if (s == HitCounters::kOwned) return;
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return done; });
    });
    got = stripe.get();
  }
  holders.back().join();
  // That thread's end gave back nothing it did not own: every owned stripe
  // is still held, so the next thread shares too (a stripe given twice
  // would lose counts, its updates being a plain load and store).
  CHECK(stripe_of_a_new_thread() == HitCounters::kOwned);
  {
    std::lock_guard lock(m);
    done = true;
  }
  cv.notify_all();
  holders.pop_back();
  for (std::thread& t : holders) t.join();
  CHECK(stripe_of_a_new_thread() < HitCounters::kOwned);
}
