// Concurrency soak (issue 12 §6): eight threads derive every planned
// derivation of an LLM-shaped model (tools/gen/make_llm_model.py: dozens of
// layers of MatMul and MatMulNBits weights, small dimensions) through the
// public API, on `cpu` and on `vulkan` at once (each thread alternates the
// two), over one shared DeviceWeights and one shared DerivedWeights per
// backend. Run under ThreadSanitizer in CI's tsan stage (label tsan, with
// libballast and the Vulkan plugin instrumented), and in the dev stage.
//
// Three rounds, each phase on a fresh memo over the same sources:
// Phase 1: every thread calls derive_weight() on every entry (four
//   threads in one order, four in others). Single-flight: one build per
//   key, every thread gets the same pointers, and the memo's stats add up
//   exactly (hits + misses = requests, builds + waits = misses,
//   builds = keys).
// Phase 2: four threads call derive_weight(), four derive_weights()
//   (batches that build, then insert, and free their copy when another
//   writer was first).
// After each phase every value is byte-equal to a single-threaded run on
// the same backend, the backend holds exactly the memo's allocations plus
// the uploaded sources, and after teardown nothing is left on the device.
#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/model_resource.hpp>
#include <doctest/doctest.h>

#include "unit/store/scratch_dir.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace ballast;

namespace {

constexpr int kThreads = 8;
constexpr int kLayers = 24;
constexpr int kRounds = 3;  // each: phase 1 and phase 2 on fresh memos

struct Bytes {
  std::vector<std::byte> first, second;
  friend bool operator==(const Bytes&, const Bytes&) = default;
};

struct Device {
  std::string name;
  std::unique_ptr<GpuBackend> gpu;
  std::vector<Bytes> reference;         // single-threaded results, by plan entry
  std::size_t keys = 0;                 // distinct memo keys of the plan
  std::uint64_t value_allocations = 0;  // device allocations those keys' values take
};

// Copies a derived value (both halves of a pair) back to the host.
Bytes read_back(GpuBackend& gpu, const PlannedDerivation& p, const DerivedValue& v) {
  DerivationLaunch l = p.launch;
  auto sizes = derivation_sizes(l);
  REQUIRE_MESSAGE(sizes.ok(), sizes.error().to_string());
  Bytes out{std::vector<std::byte>(sizes->dst_bytes), std::vector<std::byte>(sizes->dst2_bytes)};
  Status s = gpu.copy_to_host(out.first, v.first, 0);
  REQUIRE_MESSAGE(s.ok(), s.error().to_string());
  if (!out.second.empty()) {
    s = gpu.copy_to_host(out.second, v.second, 0);
    REQUIRE_MESSAGE(s.ok(), s.error().to_string());
  }
  return out;
}

// The order thread t walks the plan in. Threads 0, 2, 4 and 6 walk it in
// the same order, so they ask for the same key at the same moment (builds
// and waits); odd threads start a quarter further on each and walk
// backwards, so threads also meet entries from both sides.
std::vector<std::size_t> order_of(int t, std::size_t n) {
  std::vector<std::size_t> order(n);
  const std::size_t start = t % 2 == 0 ? 0 : n * static_cast<std::size_t>(t / 2) / 4;
  for (std::size_t i = 0; i < n; ++i) order[i] = (i + start) % n;
  if (t % 2 == 1) std::reverse(order.begin(), order.end());
  return order;
}

// Errors from worker threads, reported by the main thread.
class Failures {
 public:
  void add(std::string what) {
    std::lock_guard lock(mutex_);
    if (list_.size() < 20) list_.push_back(std::move(what));
    ++count_;
  }
  void report() const {
    for (const std::string& f : list_) FAIL_CHECK(f);
    REQUIRE(count_ == 0);
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> list_;
  std::size_t count_ = 0;
};

std::filesystem::path generate_or_skip(const testing::ScratchDir& dir) {
  const std::string python = BALLAST_TEST_PYTHON;
  if (std::system((python + " -c 'import onnx, numpy' >/dev/null 2>&1").c_str()) != 0) {
    std::cout << "skipped: " << python << " cannot import onnx and numpy (install python3-onnx python3-numpy)\n";
    std::exit(77);
  }
  const std::string cmd = python + " " + BALLAST_SOURCE_DIR + "/tools/gen/make_llm_model.py '" + dir.path().string() +
                          "' --layers " + std::to_string(kLayers) +
                          " --hidden 64 --ffn 128 --vocab 256 --block 32 >/dev/null";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  return dir / "llm.onnx";
}

// Memo lookups one derive_weight() of `p` makes: its own, plus the
// transposed copy a per-output-channel quant_int8 reads.
std::uint64_t lookups_one(const PlannedDerivation& p) { return p.of_transposed ? 2 : 1; }
// Memo lookups one derive_weights() of the plan makes: one per entry of
// wave 1, one per transposed copy, two per entry of wave 2 (the copy, then
// the value).
std::uint64_t lookups_batch(const std::vector<PlannedDerivation>& plan) {
  std::uint64_t n = 0;
  for (const PlannedDerivation& p : plan) n += p.of_transposed ? 3 : 1;
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("soak: 8 threads derive every weight of an LLM-shaped model on cpu and vulkan at once") {
  const auto t0 = std::chrono::steady_clock::now();
  testing::ScratchDir dir("derive-soak");
  const auto path = generate_or_skip(dir);
  auto loaded = load_onnx(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  const Model& model = *loaded;
  auto planned = plan_derivations(model);
  REQUIRE_MESSAGE(planned.ok(), planned.error().to_string());
  const std::vector<PlannedDerivation>& plan = *planned;
  const std::size_t transposed =
      static_cast<std::size_t>(std::count_if(plan.begin(), plan.end(), [](auto& p) { return p.of_transposed; }));
  // Per layer: q, k, v, o (transpose, quant_int8 of the transpose), gate,
  // up, down (dequant_int4, repack_int4); lm_head: transpose, to_f16, quant_int8.
  REQUIRE(plan.size() == kLayers * 14 + 3);

  std::vector<Device> devices;
  for (const char* name : {"cpu", "vulkan"}) {
    auto gpu = open_backend(name);
    if (!gpu.ok()) {
      REQUIRE_MESSAGE(std::string(name) != "cpu", gpu.error().to_string());
      MESSAGE("vulkan skipped: " << gpu.error().to_string());
      continue;
    }
    devices.push_back(Device{name, std::move(*gpu), {}, 0, 0});
  }

  // The single-threaded run every concurrent result must equal.
  for (Device& d : devices) {
    const auto before = d.gpu->counters();
    DeviceWeights sources(*d.gpu, model.store());
    DerivedWeights memo;
    TeardownHost<GpuBackend> host(*d.gpu);
    host.add(sources);
    host.add(memo);
    const DeriveContext ctx{*d.gpu, model, sources, memo};
    for (const PlannedDerivation& p : plan) {
      auto v = derive_weight(ctx, p);
      REQUIRE_MESSAGE(v.ok(), d.name << ": " << v.error().to_string());
      d.reference.push_back(read_back(*d.gpu, p, *v));
    }
    d.keys = memo.len();
    const auto stats = memo.stats();
    CHECK(stats.builds == d.keys);
    const auto during = d.gpu->counters();
    d.value_allocations = during.live_allocations - before.live_allocations - sources.residency().uploaded_weights;
    const auto report = host.teardown(*d.gpu);
    REQUIRE_MESSAGE(report.ok(), report.to_string());
  }
  const double setup_s = seconds_since(t0);

  // Both phases over one DeviceWeights per backend.
  struct Shared {
    Device* device;
    std::unique_ptr<DeviceWeights> sources;
    std::unique_ptr<DerivedWeights> memo;
    std::unique_ptr<DeriveContext> ctx;
    AllocationCounters baseline;
  };
  std::vector<Shared> shared;
  for (Device& d : devices) {
    Shared s{&d, nullptr, nullptr, nullptr, d.gpu->counters()};
    s.sources = std::make_unique<DeviceWeights>(*d.gpu, model.store());
    shared.push_back(std::move(s));
  }
  auto fresh_memos = [&] {
    for (Shared& s : shared) {
      s.memo = std::make_unique<DerivedWeights>();
      s.ctx = std::make_unique<DeriveContext>(DeriveContext{*s.device->gpu, model, *s.sources, *s.memo});
    }
  };

  // After a phase: every thread saw the memo's pointers, the values are the
  // single-threaded bytes, and the device holds the memo's values plus the
  // uploaded sources, nothing more.
  auto check_phase = [&](const char* phase, const std::vector<std::vector<std::vector<DerivedValue>>>& seen) {
    for (std::size_t b = 0; b < shared.size(); ++b) {
      Shared& s = shared[b];
      GpuBackend& gpu = *s.device->gpu;
      CAPTURE(phase);
      CAPTURE(s.device->name);
      CHECK(s.memo->len() == s.device->keys);
      for (std::size_t i = 0; i < plan.size(); ++i) {
        const DerivedValue& v0 = seen[0][b][i];
        for (int t = 1; t < kThreads; ++t) {
          const DerivedValue& v = seen[static_cast<std::size_t>(t)][b][i];
          if (v.first != v0.first || v.second != v0.second || !(v.key == v0.key))
            FAIL_CHECK(phase << " " << s.device->name << ": thread " << t << " got another value for entry " << i
                             << " (" << plan[i].weight << ")");
        }
        if (read_back(gpu, plan[i], v0) != s.device->reference[i])
          FAIL_CHECK(phase << " " << s.device->name << ": entry " << i << " (" << plan[i].weight << ", "
                           << derivation_name(plan[i].kind()) << ") differs from the single-threaded run");
      }
      const auto now = gpu.counters();
      CHECK(now.live_allocations - s.baseline.live_allocations ==
            s.device->value_allocations + s.sources->residency().uploaded_weights);
    }
  };

  auto run_threads = [&](auto&& body) {
    std::vector<std::vector<std::vector<DerivedValue>>> seen(
        kThreads, std::vector<std::vector<DerivedValue>>(shared.size(), std::vector<DerivedValue>(plan.size())));
    Failures failures;
    std::vector<std::thread> threads;
    std::atomic<int> ready{0};
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();  // start together
        body(t, seen[static_cast<std::size_t>(t)], failures);
      });
    for (std::thread& th : threads) th.join();
    failures.report();
    return seen;
  };

  // Totals over the rounds, per backend, for the closing message.
  struct Totals {
    std::uint64_t requests = 0, hits = 0, builds = 0, waits = 0, mixed_builds = 0, lost_inserts = 0;
  };
  std::vector<Totals> totals(shared.size());
  double phase1_s = 0, phase2_s = 0;
  auto release_memos = [&] {
    for (Shared& s : shared) {
      const Released r = s.memo->release(*s.device->gpu);
      REQUIRE_MESSAGE(r.status.ok(), r.status.error().to_string());
    }
  };
  auto derive_each = [&](int t, std::vector<std::vector<DerivedValue>>& out, Failures& failures) {
    for (std::size_t i : order_of(t, plan.size()))
      for (std::size_t b = 0; b < shared.size(); ++b) {
        auto v = derive_weight(*shared[b].ctx, plan[i]);
        if (!v.ok())
          failures.add(shared[b].device->name + ": " + v.error().to_string());
        else
          out[b][i] = *v;
      }
  };

  for (int round = 0; round < kRounds; ++round) {
    CAPTURE(round);
    // ---- phase 1: derive_weight() from every thread
    fresh_memos();
    auto t1 = std::chrono::steady_clock::now();
    auto seen = run_threads(derive_each);
    phase1_s += seconds_since(t1);
    check_phase("derive_weight", seen);
    for (std::size_t b = 0; b < shared.size(); ++b) {
      const Shared& s = shared[b];
      const DerivedWeightsStats st = s.memo->stats();
      const std::uint64_t requests = kThreads * (plan.size() + transposed);
      CAPTURE(s.device->name);
      CHECK(st.hits + st.misses == requests);
      CHECK(st.builds + st.waits == st.misses);
      CHECK(st.builds == s.device->keys);  // single-flight: one build per key
      CHECK(st.failed_builds == 0);
      CHECK(st.rejected_inserts == 0);
      totals[b].requests += requests;
      totals[b].hits += st.hits;
      totals[b].builds += st.builds;
      totals[b].waits += st.waits;
    }
    release_memos();

    // ---- phase 2: derive_weight() and derive_weights() together
    fresh_memos();
    auto t2 = std::chrono::steady_clock::now();
    seen = run_threads([&](int t, std::vector<std::vector<DerivedValue>>& out, Failures& failures) {
      if (t % 2 == 0) return derive_each(t, out, failures);
      for (std::size_t b = 0; b < shared.size(); ++b) {
        auto all = derive_weights(*shared[b].ctx, plan);
        if (!all.ok())
          failures.add(shared[b].device->name + ": " + all.error().to_string());
        else
          out[b] = std::move(*all);
      }
    });
    phase2_s += seconds_since(t2);
    check_phase("derive_weight + derive_weights", seen);
    for (std::size_t b = 0; b < shared.size(); ++b) {
      const Shared& s = shared[b];
      const DerivedWeightsStats st = s.memo->stats();
      std::uint64_t requests = 0;
      for (const PlannedDerivation& p : plan) requests += (kThreads / 2) * lookups_one(p);
      requests += (kThreads / 2) * lookups_batch(plan);
      CAPTURE(s.device->name);
      CHECK(st.hits + st.misses == requests);
      CHECK(st.builds <= s.device->keys);
      CHECK(st.failed_builds == 0);
      totals[b].mixed_builds += st.builds;
      totals[b].lost_inserts += st.rejected_inserts;
    }
    if (round + 1 < kRounds) release_memos();
  }
  std::string summary;
  for (std::size_t b = 0; b < shared.size(); ++b) {
    const Totals& x = totals[b];
    summary += "; " + shared[b].device->name + ": derive_weight " + std::to_string(x.requests) + " requests, " +
               std::to_string(x.hits) + " hits, " + std::to_string(x.builds) + " builds, " + std::to_string(x.waits) +
               " waits; mixed " + std::to_string(x.mixed_builds) + " builds, " + std::to_string(x.lost_inserts) +
               " batch inserts lost to an earlier writer (freed)";
  }

  // ---- teardown: nothing left on either device
  for (Shared& s : shared) {
    TeardownHost<GpuBackend> host(*s.device->gpu);
    host.add(*s.sources);
    host.add(*s.memo);
    const auto report = host.teardown(*s.device->gpu);
    CHECK_MESSAGE(report.ok(), report.to_string());
    const auto after = s.device->gpu->counters();
    CHECK(after.live_allocations == s.baseline.live_allocations);
    CHECK(after.live_bytes == s.baseline.live_bytes);
    CHECK(after.live_registrations == s.baseline.live_registrations);
  }
  MESSAGE(kThreads << " threads, " << kRounds << " rounds, " << plan.size() << " planned derivations (" << kLayers
                   << " layers) on " << shared.size() << " backend(s); setup " << setup_s << " s, phase 1 " << phase1_s
                   << " s, phase 2 " << phase2_s << " s" << summary);
}
