// Concurrency of DerivedWeights; also run under ThreadSanitizer (label tsan).
#include <ballast/derived_weights.hpp>
#include <doctest/doctest.h>

#include "memo/memo_map.hpp"
#include "unit/memo/recording_backend.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace ballast;
using ballast::test::key_of;
using namespace std::chrono_literals;

namespace {

// Generous: a failing test must fail, not hang, but a loaded sanitizer
// machine must not trip it either.
constexpr auto kPatience = 20s;

template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// N parties meet; each waits at most kPatience for the others.
class Rendezvous {
 public:
  explicit Rendezvous(int parties) : left_(parties) {}
  bool arrive_and_wait() {
    std::unique_lock lock(mutex_);
    if (--left_ == 0) cv_.notify_all();
    return cv_.wait_for(lock, kPatience, [this] { return left_ <= 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int left_;
};

void join_all(std::vector<std::thread>& threads) {
  for (std::thread& t : threads) t.join();
}

}  // namespace

TEST_CASE("concurrent callers of one (kind, key) share one build and all get its value") {
  DerivedWeights memo;
  constexpr int kThreads = 8;
  std::atomic<int> builds{0};
  std::vector<Result<DevicePtr>> results(kThreads, make_error(ErrorCode::internal, "not run"));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      results[t] = memo.get_or_build_ptr(derive::transpose, key_of(0xABC000), [&]() -> Result<DerivedPtr> {
        builds.fetch_add(1);
        // Hold the build open until every other caller is waiting on it.
        if (!eventually([&] { return memo.stats().waits == kThreads - 1; }))
          return make_error(ErrorCode::internal, "the other callers never joined the build");
        return DerivedPtr{0xD000, 64};
      });
    });
  join_all(threads);
  CHECK(builds.load() == 1);
  for (const auto& r : results) {
    REQUIRE(r.ok());
    CHECK(*r == 0xD000);
  }
  CHECK(memo.stats().waits == kThreads - 1);
  CHECK(memo.stats().builds == 1);
  CHECK(memo.len() == 1);
}

TEST_CASE("a failed build reaches every waiter, is not memoized, and the next call retries") {
  DerivedWeights memo;
  constexpr int kThreads = 6;
  std::atomic<int> builds{0};
  std::vector<Result<DevicePair>> results(kThreads, DevicePair{});
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      results[t] = memo.get_or_build_pair(derive::quant_int8, key_of(0x7000), [&]() -> Result<DerivedPair> {
        builds.fetch_add(1);
        eventually([&] { return memo.stats().waits == kThreads - 1; });
        return make_error(ErrorCode::out_of_memory, "device full");
      });
    });
  join_all(threads);
  CHECK(builds.load() == 1);
  for (const auto& r : results) CHECK(r.code() == ErrorCode::out_of_memory);
  CHECK(memo.is_empty());
  auto retry = memo.get_or_build_pair(derive::quant_int8, key_of(0x7000), []() -> Result<DerivedPair> {
    return DerivedPair{{0x1, 1}, {0x2, 1}};
  });
  REQUIRE(retry.ok());
  CHECK(*retry == DevicePair{0x1, 0x2});
  CHECK(builds.load() == 1);
  CHECK(memo.stats().builds == 2);
}

TEST_CASE("builds of different keys run in parallel, even in one shard") {
  // Two keys the memo files under the same shard lock: if a build held that
  // lock (or any lock shared by both keys), the rendezvous would time out.
  const std::uint64_t a = 0x100000;
  std::uint64_t b = a + 0x100;
  while (memo::MemoMap<DerivedPtr>::shard_index(key_of(b)) != memo::MemoMap<DerivedPtr>::shard_index(key_of(a))) b += 0x100;

  DerivedWeights memo;
  Rendezvous both(2);
  auto build = [&](DevicePtr value) {
    return [&both, value]() -> Result<DerivedPtr> {
      if (!both.arrive_and_wait()) return make_error(ErrorCode::internal, "builds were serialised");
      return DerivedPtr{value, 8};
    };
  };
  Result<DevicePtr> ra = make_error(ErrorCode::internal, "not run");
  Result<DevicePtr> rb = make_error(ErrorCode::internal, "not run");
  std::thread ta([&] { ra = memo.get_or_build_ptr(derive::to_f16, key_of(a), build(0xA)); });
  std::thread tb([&] { rb = memo.get_or_build_ptr(derive::to_f16, key_of(b), build(0xB)); });
  ta.join();
  tb.join();
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  CHECK(*ra == 0xA);
  CHECK(*rb == 0xB);

  // Builds of different kinds for the SAME key are independent too.
  Rendezvous kinds(2);
  Result<DevicePtr> rt = make_error(ErrorCode::internal, "not run");
  Result<DevicePair> rq = make_error(ErrorCode::internal, "not run");
  std::thread tt([&] {
    rt = memo.get_or_build_ptr(derive::transpose, key_of(a), [&]() -> Result<DerivedPtr> {
      if (!kinds.arrive_and_wait()) return make_error(ErrorCode::internal, "builds were serialised");
      return DerivedPtr{0xC, 1};
    });
  });
  std::thread tq([&] {
    rq = memo.get_or_build_pair(derive::repack_int4, key_of(a), [&]() -> Result<DerivedPair> {
      if (!kinds.arrive_and_wait()) return make_error(ErrorCode::internal, "builds were serialised");
      return DerivedPair{{0xD, 1}, {0xE, 1}};
    });
  });
  tt.join();
  tq.join();
  CHECK(rt.ok());
  CHECK(rq.ok());
}

TEST_CASE("hits on a key whose neighbour in the shard is building are not blocked") {
  const std::uint64_t ready_key = 0x200000;
  std::uint64_t busy_key = ready_key + 0x100;
  while (memo::MemoMap<DerivedPtr>::shard_index(key_of(busy_key)) != memo::MemoMap<DerivedPtr>::shard_index(key_of(ready_key)))
    busy_key += 0x100;
  DerivedWeights memo;
  REQUIRE(memo.insert_ptr(derive::transpose, key_of(ready_key), DerivedPtr{0x77, 1}).ok());
  std::atomic<bool> building{false};
  std::atomic<bool> finish{false};
  std::thread builder([&] {
    static_cast<void>(memo.get_or_build_ptr(derive::transpose, key_of(busy_key), [&]() -> Result<DerivedPtr> {
      building = true;
      eventually([&] { return finish.load(); });
      return DerivedPtr{0x78, 1};
    }));
  });
  REQUIRE(eventually([&] { return building.load(); }));
  for (int i = 0; i < 1000; ++i) REQUIRE(memo.get_ptr(derive::transpose, key_of(ready_key)) == 0x77);
  CHECK_FALSE(memo.get_ptr(derive::transpose, key_of(busy_key)).has_value());  // in flight: a miss, not a wait
  finish = true;
  builder.join();
  CHECK(memo.get_ptr(derive::transpose, key_of(busy_key)) == 0x78);
}

TEST_CASE("an insert racing a build waits for it and loses to it") {
  DerivedWeights memo;
  std::atomic<bool> building{false};
  std::atomic<bool> inserted{false};
  std::atomic<bool> insert_returned_early{false};
  std::thread builder([&] {
    static_cast<void>(memo.get_or_build_ptr(derive::dequant_int4, key_of(0x900), [&]() -> Result<DerivedPtr> {
      building = true;
      std::this_thread::sleep_for(50ms);
      insert_returned_early = inserted.load();
      return DerivedPtr{0x901, 4};
    }));
  });
  REQUIRE(eventually([&] { return building.load(); }));
  auto r = memo.insert_ptr(derive::dequant_int4, key_of(0x900), DerivedPtr{0x902, 4});
  inserted = true;
  builder.join();
  CHECK_FALSE(insert_returned_early.load());
  REQUIRE(r.ok());
  CHECK(r->memoized == 0x901);
  REQUIRE(r->rejected.has_value());
  CHECK(r->rejected->first == 0x902);
}

TEST_CASE("racing inserts: exactly one writer wins each key and every loser gets its own value back") {
  constexpr int kThreads = 8;
  constexpr int kKeys = 2000;
  DerivedWeights memo;
  std::vector<std::atomic<int>> winners(kKeys);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeys; ++k) {
        const DevicePtr mine = (static_cast<DevicePtr>(k) << 8) | static_cast<DevicePtr>(t);
        auto r = memo.insert_pair(derive::repack_int4, key_of(0x1000 + k), DerivedPair{{mine, 1}, {mine + 1, 1}});
        if (!r.ok()) {
          mismatches.fetch_add(1);
          continue;
        }
        if (r->inserted()) {
          winners[k].fetch_add(1);
          if (r->memoized.first != mine) mismatches.fetch_add(1);
        } else if (r->rejected->first.first != mine || (r->memoized.first >> 8) != static_cast<DevicePtr>(k)) {
          mismatches.fetch_add(1);
        }
      }
    });
  join_all(threads);
  CHECK(mismatches.load() == 0);
  for (int k = 0; k < kKeys; ++k) CHECK(winners[k].load() == 1);
  CHECK(memo.len() == kKeys);
  CHECK(memo.stats().rejected_inserts == (kThreads - 1) * kKeys);
}

TEST_CASE("8 threads x 10,000 keys, each touched many times in random order: one build per (kind, key)") {
  constexpr int kThreads = 8;
  constexpr int kKeys = 10000;
  // Per thread per key: every kind at least once (item % kTouches picks it).
  constexpr int kTouches = kDerivationCount + 1;
  constexpr int kWindow = 512;  // threads sweep the keys together so first touches collide
  DerivedWeights memo;

  // Every key is used under every kind, so each (kind, key) pair is a
  // separate single-flight: kDerivationCount x 10,000 builds in all.
  struct Slot {
    std::atomic<int> builds{0};
    std::atomic<DevicePtr> value{0};
  };
  auto slots = std::make_unique<Slot[]>(static_cast<std::size_t>(kKeys) * kDerivationCount);
  std::atomic<DevicePtr> next_value{0x1000};
  std::atomic<int> wrong{0};
  std::atomic<int> errors{0};
  std::atomic<int> ready{0};

  auto touch = [&](int key_index, Derivation kind) {
    Slot& slot = slots[static_cast<std::size_t>(key_index) * kDerivationCount + static_cast<int>(kind)];
    const std::uint64_t key = 0x7f0000000000ull + static_cast<std::uint64_t>(key_index) * 256;
    auto build_value = [&] {
      slot.builds.fetch_add(1, std::memory_order_relaxed);
      const DevicePtr v = next_value.fetch_add(2, std::memory_order_relaxed);
      slot.value.store(v, std::memory_order_relaxed);
      std::this_thread::yield();  // widen the window in which others can pile in
      return v;
    };
    if (derivation_yields_pair(kind)) {
      auto r = memo.get_or_build_pair(kind, key_of(key), [&]() -> Result<DerivedPair> {
        const DevicePtr v = build_value();
        return DerivedPair{{v, 2}, {v + 1, 1}};
      });
      if (!r.ok()) {
        errors.fetch_add(1);
        return;
      }
      const DevicePtr v = slot.value.load(std::memory_order_relaxed);
      if (r->first != v || r->second != v + 1) wrong.fetch_add(1);
    } else {
      auto r = memo.get_or_build_ptr(kind, key_of(key), [&]() -> Result<DerivedPtr> { return DerivedPtr{build_value(), 2}; });
      if (!r.ok()) {
        errors.fetch_add(1);
        return;
      }
      if (*r != slot.value.load(std::memory_order_relaxed)) wrong.fetch_add(1);
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      // Each key appears kTouches times; shuffled within sliding windows so
      // the threads meet on the same keys at about the same time, in a
      // different order each.
      std::vector<std::uint32_t> order;
      order.reserve(static_cast<std::size_t>(kKeys) * kTouches);
      for (int k = 0; k < kKeys; ++k)
        for (int i = 0; i < kTouches; ++i) order.push_back(static_cast<std::uint32_t>(k * kTouches + i));
      std::mt19937 rng(1234u + static_cast<unsigned>(t));
      for (std::size_t at = 0; at < order.size(); at += kWindow / 2)
        std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(at),
                     order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), at + kWindow)), rng);
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (std::uint32_t item : order) {
        const int key_index = static_cast<int>(item / kTouches);
        const auto kind = static_cast<Derivation>((item % kTouches + key_index) % kDerivationCount);
        touch(key_index, kind);
      }
    });
  join_all(threads);

  CHECK(errors.load() == 0);
  CHECK(wrong.load() == 0);
  int not_once = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(kKeys) * kDerivationCount; ++i)
    not_once += slots[i].builds.load() == 1 ? 0 : 1;
  CHECK(not_once == 0);
  CHECK(memo.len() == static_cast<std::size_t>(kKeys) * kDerivationCount);
  const DerivedWeightsStats s = memo.stats();
  const std::uint64_t calls = std::uint64_t{kThreads} * kKeys * kTouches;
  CHECK(s.builds == std::uint64_t{kKeys} * kDerivationCount);
  CHECK(s.failed_builds == 0);
  CHECK(s.hits + s.misses == calls);
  CHECK(s.builds + s.waits <= s.misses);
  MESSAGE("hits " << s.hits << ", misses " << s.misses << ", builds " << s.builds << ", waits " << s.waits);
}

TEST_CASE("hit and miss counts stay exact with more live threads than counter stripes") {
  // More threads at once than memo::HitCounters::kOwned: the extra ones
  // share the overflow stripe, and no count may be lost either way.
  constexpr int kThreads = 80;
  constexpr int kLookups = 500;
  DerivedWeights memo;
  REQUIRE(memo.insert_ptr(derive::to_f16, key_of(0x4000), DerivedPtr{0x4001, 1}).ok());
  Rendezvous all(kThreads);
  std::atomic<int> late{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      // A thread leases its stripe at its first count: count once before
      // the rendezvous, so all kThreads hold a lease at once (after it a
      // fast thread could finish and hand its stripe on before a slow one
      // starts, and nobody would use the overflow stripe).
      static_cast<void>(memo.get_ptr(derive::to_f16, key_of(0x4000)));
      static_cast<void>(memo.get_ptr(derive::to_f16, key_of(0x4100)));
      if (!all.arrive_and_wait()) late.fetch_add(1);
      for (int i = 1; i < kLookups; ++i) {
        static_cast<void>(memo.get_ptr(derive::to_f16, key_of(0x4000)));
        static_cast<void>(memo.get_ptr(derive::to_f16, key_of(0x4100)));
      }
    });
  join_all(threads);
  CHECK(late.load() == 0);
  const DerivedWeightsStats s = memo.stats();
  CHECK(s.hits == std::uint64_t{kThreads} * kLookups);
  CHECK(s.misses == std::uint64_t{kThreads} * kLookups);
}

TEST_CASE("a build still running when the memo is released lands afterwards and is freed by the next release") {
  test::RecordingBackend gpu;
  DerivedWeights memo;
  const DevicePtr early = gpu.allocate(8).value();
  const DevicePtr late_value = gpu.allocate(8).value();
  REQUIRE(memo.insert_ptr(derive::transpose, key_of(0x10), DerivedPtr{early, 8}).ok());
  std::atomic<bool> building{false};
  std::atomic<bool> released{false};
  Result<DevicePtr> late = make_error(ErrorCode::internal, "not run");
  std::thread builder([&] {
    late = memo.get_or_build_ptr(derive::transpose, key_of(0x20), [&]() -> Result<DerivedPtr> {
      building = true;
      eventually([&] { return released.load(); });
      return DerivedPtr{late_value, 8};
    });
  });
  REQUIRE(eventually([&] { return building.load(); }));
  // release() racing a build is misuse; it must still be memory-safe and
  // lose nothing.
  CHECK(memo.release(gpu).allocations_freed == 1);
  CHECK(gpu.freed() == std::vector<DevicePtr>{early});
  released = true;
  builder.join();
  REQUIRE(late.ok());
  CHECK(*late == late_value);
  CHECK(memo.get_ptr(derive::transpose, key_of(0x20)) == late_value);
  CHECK_FALSE(memo.get_ptr(derive::transpose, key_of(0x10)).has_value());
  CHECK(memo.len() == 1);
  CHECK(memo.release(gpu).allocations_freed == 1);
  CHECK(gpu.freed() == std::vector<DevicePtr>{early, late_value});
  CHECK(gpu.counters().live_allocations == 0);
}
