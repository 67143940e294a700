// Launches, allocations and registrations from several threads at once on
// one CPU backend (run under ThreadSanitizer by the tsan stage).
#include "cpu_test_support.hpp"

#include <reference/reference.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

using namespace ballast;
using cpu_test::bytes_of;

TEST_CASE("concurrent launches give the same results as serial ones") {
  auto b = cpu_test::open_cpu({{"threads", "2"}});
  std::vector<float> w(64 * 48);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 97) * 0.37f - 11.0f;
  DerivationLaunch shape;
  shape.kind = Derivation::quant_int8;
  shape.src_type = DataType::float32;
  shape.rows = 64;
  shape.cols = 48;
  auto expected = reference::derive(shape, {bytes_of(w)});
  REQUIRE(expected.ok());
  // The weight is registered once, read-only, and shared by every thread.
  auto reg = b->register_host(w.data(), w.size() * 4, HostAccess::read_only);
  REQUIRE(reg.ok());

  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int iter = 0; iter < 20; ++iter) {
        DerivationLaunch l = shape;
        l.src = *reg;
        auto dst = b->allocate(64 * 48);
        auto dst2 = b->allocate(64 * 4);
        if (!dst.ok() || !dst2.ok()) {
          ++failures;
          return;
        }
        l.dst = *dst;
        l.dst2 = *dst2;
        std::vector<std::byte> codes(64 * 48), scales(64 * 4);
        const bool ok = b->launch(l).ok() && b->copy_to_host(codes, *dst, 0).ok() && b->copy_to_host(scales, *dst2, 0).ok();
        if (!ok || codes != expected->dst || scales != expected->dst2) ++failures;
        if (!b->free(*dst).ok() || !b->free(*dst2).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
  CHECK(b->unregister_host(*reg).ok());
  const auto c = b->counters();
  CHECK(c.live_allocations == 0);
  CHECK(c.live_bytes == 0);
  CHECK(c.live_registrations == 0);
}

namespace {
// The threads of this process now (the entries of /proc/self/task).
std::size_t process_threads() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}
// The count once it settles at `expected` (a joined thread's task entry can
// outlive the join by a moment), or the last count after two seconds.
std::size_t threads_settled_at(std::size_t expected) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  std::size_t n = process_threads();
  while (n != expected && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    n = process_threads();
  }
  return n;
}
}  // namespace

TEST_CASE("threads=N runs N - 1 workers beside the calling thread, and none are left after close") {
  // The caller takes chunks too, so an N-thread backend adds N - 1: one
  // more would idle a thread per backend for its whole life.
  const std::size_t before = process_threads();
  for (unsigned n : {1u, 2u, 4u}) {
    INFO("threads=" << n);
    {
      auto b = cpu_test::open_cpu({{"threads", std::to_string(n)}});
      CHECK(threads_settled_at(before + (n - 1)) == before + (n - 1));
    }
    CHECK(threads_settled_at(before) == before);
  }
}

TEST_CASE("large blocks allocated and freed from several threads never share pages") {
  // Large blocks are mapped and their freed pages retained and moved
  // (cpu/allocator.hpp); a small bound makes threads both reuse and unmap.
  auto b = cpu_test::open_cpu({{"threads", "2"}, {"retain_mib", "12"}});
  constexpr std::uint64_t kMiB = 1ull << 20;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int iter = 0; iter < 12; ++iter) {
        const std::uint64_t bytes = (2 + (t + iter) % 4) * 2 * kMiB + static_cast<std::uint64_t>(iter);
        auto p = b->allocate(bytes);
        if (!p.ok()) {
          ++failures;
          return;
        }
        auto* bytes_at = reinterpret_cast<unsigned char*>(static_cast<std::uintptr_t>(*p));
        const auto mark = static_cast<unsigned char>(16 * t + iter);
        std::memset(bytes_at, mark, bytes);
        std::this_thread::yield();
        for (std::uint64_t i = 0; i < bytes; i += 4096)  // nobody else wrote here meanwhile
          if (bytes_at[i] != mark || bytes_at[bytes - 1] != mark) {
            ++failures;
            break;
          }
        if (!b->free(*p).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures.load() == 0);
  CHECK(b->counters().live_allocations == 0);
}
