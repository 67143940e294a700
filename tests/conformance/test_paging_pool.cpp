// The block pool of paged residency (issue 28), on the backend under test:
// a cyclic walk over weights of one size reuses evicted blocks (hits on
// every page-in once the budget is full, the backend's allocations stop
// growing); pooled plus live bytes never exceed the budget and equal the
// backend's live bytes; a page-in of another size releases the pooled
// block rather than evicting more or failing; values are the unpooled
// path's byte for byte; a failed copy leaves its block pooled, a failed
// allocation with blocks pooled leaves everything consistent, and release
// frees every pooled block. set_budget: lowered, it evicts down to the new
// budget (or is refused, changing nothing); raised, a waiting group gets in;
// lowered under a waiting group's size, the group fails at once.
// Model: tests/support/uniform_layers_model.hpp.
#include "conformance/conformance.hpp"

#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <support/fault_injecting_backend.hpp>
#include <support/uniform_layers_model.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace ballast;
using Uniform = ballast::test_models::UniformLayersModel;
using ballast::testing::FaultInjectingBackend;
using ballast::testing::FaultOp;

namespace {

constexpr std::uint64_t kLayer = Uniform::kLayerBytes;

struct PoolFixture {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("ballast_conformance_pool_" + std::to_string(::getpid()));
  Model model;
  std::vector<ValueId> layers;  // layer0 .. layer7
  ValueId odd{};
  std::map<ValueId, std::vector<std::byte>> file;  // every weight as its file holds it

  PoolFixture() {
    std::filesystem::remove_all(dir);
    Uniform::write(dir);
    auto m = load_onnx(dir / "model.onnx");
    REQUIRE_MESSAGE(m.ok(), m.status().to_string());
    model = std::move(*m);
    for (int i = 0; i < Uniform::kLayers; ++i) layers.push_back(*model.value_id(Uniform::layer(i)));
    odd = *model.value_id("odd");
    for (const auto& [id, w] : model.store().weights()) {
      std::vector<std::byte> bytes(w.byte_length());
      REQUIRE(model.store().copy_bytes(w, 0, bytes).ok());
      file[id] = std::move(bytes);
    }
  }
  ~PoolFixture() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  PoolFixture(const PoolFixture&) = delete;
  PoolFixture& operator=(const PoolFixture&) = delete;

  // Source weights only (no derivations planned): the budget is in layers.
  std::unique_ptr<Residency> open(GpuBackend& gpu, ResidencyStrategy s, std::optional<std::uint64_t> budget) {
    ResidencyOptions o;
    o.strategy = s;
    o.budget_bytes = budget;
    o.derivations.emplace();
    auto r = Residency::create(gpu, model, o);
    REQUIRE_MESSAGE(r.ok(), r.status().to_string());
    return std::move(*r);
  }
};

std::vector<std::byte> read(GpuBackend& gpu, const Pinned& p) {
  std::vector<std::byte> out(p.bytes());
  if (!out.empty()) REQUIRE(gpu.copy_to_host(out, p.first(), 0).ok());
  return out;
}

// The budget's invariants after any call: pooled and pinned bytes inside
// what is held, that inside the budget, and what is held exactly the
// backend's live bytes for this object (`base`: live bytes before it).
void check_accounting(const Residency& r, GpuBackend& gpu, std::uint64_t base) {
  const ResidencyStats s = r.stats();
  CHECK(s.pooled_bytes + s.pinned_bytes <= s.device_bytes);
  CHECK(s.device_bytes <= s.budget_bytes);
  CHECK(s.peak_device_bytes <= s.budget_bytes);
  CHECK(s.device_bytes == gpu.counters().live_bytes - base);
}

// Pins `id`, reads it back and compares it with its file; unpins.
void pin_and_check(PoolFixture& f, Residency& r, GpuBackend& gpu, ValueId id) {
  auto p = r.pin(id);
  REQUIRE_MESSAGE(p.ok(), p.status().to_string());
  CHECK_MESSAGE(read(gpu, *p) == f.file.at(id), f.model.value_name(id));
}

}  // namespace

TEST_CASE("paging_pool: a cyclic walk reuses evicted blocks and the backend's allocations stop growing") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  FaultInjectingBackend counting(conformance::gpu());  // disarmed: counts the allocations that reach the backend
  const std::uint64_t base = counting.counters().live_bytes;
  auto paged = f.open(counting, ResidencyStrategy::paged, 4 * kLayer);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    for (ValueId id : f.layers) {
      pin_and_check(f, *paged, counting, id);
      check_accounting(*paged, counting, base);
    }
    const ResidencyStats s = paged->stats();
    // Four layers fill the budget; every later page-in takes the block of
    // the layer it evicts. From round 2 on, layers 0-2 stay resident (the
    // policy's stable set) and 3-7 stream through the fourth slot.
    const auto later = 5 * static_cast<std::uint64_t>(round);
    CHECK(s.pool_misses == 4);
    CHECK(s.pool_hits == 4 + later);
    CHECK(s.page_ins == 8 + later);
    CHECK(s.pool_releases == 0);
    CHECK(counting.calls(FaultOp::allocate) == 4);
    CHECK(counting.calls(FaultOp::free) == 0);
  }
  const Released r = paged->release(counting);
  CHECK(r.status.ok());
  CHECK(r.allocations_freed == 4);
  CHECK(counting.counters().live_allocations == 0);
}

TEST_CASE("paging_pool: a page-in of another size releases the pooled block instead of evicting more") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  GpuBackend& gpu = conformance::gpu();
  const std::uint64_t base = gpu.counters().live_bytes;
  auto paged = f.open(gpu, ResidencyStrategy::paged, 4 * kLayer);
  for (int i = 0; i < 4; ++i) pin_and_check(f, *paged, gpu, f.layers[i]);  // the budget is full
  const ResidencyStats before = paged->stats();
  CHECK(before.device_bytes == 4 * kLayer);
  // odd (8192 bytes) evicts one layer; its block fits no request here, so
  // it goes back to the backend rather than a second layer being evicted.
  pin_and_check(f, *paged, gpu, f.odd);
  check_accounting(*paged, gpu, base);
  ResidencyStats s = paged->stats();
  CHECK(s.source_evictions - before.source_evictions == 1);
  CHECK(s.pool_releases - before.pool_releases == 1);
  CHECK(s.pool_hits == before.pool_hits);
  CHECK(s.pooled_bytes == 0);
  CHECK(s.device_bytes == 3 * kLayer + Uniform::kOddBytes);
  // Back to a layer: odd is evicted and released the same way.
  pin_and_check(f, *paged, gpu, f.layers[3]);
  check_accounting(*paged, gpu, base);
  s = paged->stats();
  CHECK(s.source_evictions - before.source_evictions == 2);
  CHECK(s.pool_releases - before.pool_releases == 2);
  CHECK(s.device_bytes == 4 * kLayer);
  // Three layers still resident never moved: hits without a page-in.
  for (int i = 0; i < 3; ++i) pin_and_check(f, *paged, gpu, f.layers[i]);
  CHECK(paged->stats().page_ins == s.page_ins);
  CHECK(paged->release(gpu).status.ok());
}

TEST_CASE("paging_pool: pooled values are the unpooled path's, byte for byte") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  GpuBackend& gpu = conformance::gpu();
  std::vector<ValueId> order = f.layers;
  order.push_back(f.odd);
  std::map<ValueId, std::vector<std::byte>> reference;
  {
    auto upload = f.open(gpu, ResidencyStrategy::upload, std::nullopt);  // never evicts: never pools
    for (ValueId id : order) {
      auto p = upload->pin(id);
      REQUIRE(p.ok());
      reference[id] = read(gpu, *p);
      CHECK(reference[id] == f.file.at(id));
    }
    CHECK(upload->stats().pool_hits == 0);
    CHECK(upload->release(gpu).status.ok());
  }
  for (std::uint64_t budget : {2 * kLayer, 3 * kLayer + Uniform::kOddBytes, 5 * kLayer}) {
    CAPTURE(budget);
    const std::uint64_t base = gpu.counters().live_bytes;
    auto paged = f.open(gpu, ResidencyStrategy::paged, budget);
    for (int round = 0; round < 4; ++round)
      for (std::size_t i = 0; i < order.size(); ++i) {
        const ValueId id = order[round % 2 ? order.size() - 1 - i : i];
        auto p = paged->pin(id);
        REQUIRE_MESSAGE(p.ok(), p.status().to_string());
        CHECK_MESSAGE(read(gpu, *p) == reference.at(id), f.model.value_name(id) << " in round " << round);
        p->reset();
        check_accounting(*paged, gpu, base);
      }
    CHECK(paged->stats().pool_hits > 0);
    CHECK(paged->release(gpu).status.ok());
  }
}

TEST_CASE("paging_pool: a failed copy keeps its block pooled; a failed allocation beside pooled blocks is consistent") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  FaultInjectingBackend faulty(conformance::gpu());
  const std::uint64_t base = faulty.counters().live_bytes;
  auto paged = f.open(faulty, ResidencyStrategy::paged, 4 * kLayer);
  for (int i = 0; i < 3; ++i) pin_and_check(f, *paged, faulty, f.layers[i]);

  // The copy into layer3's fresh block fails: the block stays, pooled.
  faulty.fail_nth(FaultOp::copy_to_device, 1);
  auto refused = paged->pin(f.layers[3]);
  REQUIRE_FALSE(refused.ok());
  CHECK_MESSAGE(refused.status().to_string().find("paging in weight 'layer3'") != std::string::npos,
                refused.status().to_string());
  faulty.disarm();
  check_accounting(*paged, faulty, base);
  CHECK(paged->stats().pooled_bytes == kLayer);

  // Pooled blocks at release are freed with the rest (no leak: LeakCheck).
  {
    auto other = f.open(faulty, ResidencyStrategy::paged, 4 * kLayer);
    pin_and_check(f, *other, faulty, f.layers[0]);
    faulty.fail_nth(FaultOp::copy_to_device, 1);
    REQUIRE_FALSE(other->pin(f.layers[1]).ok());
    faulty.disarm();
    CHECK(other->stats().pooled_bytes == kLayer);
    const Released r = other->release(faulty);
    CHECK(r.status.ok());
    CHECK(r.allocations_freed == 2);
    CHECK(r.bytes_freed == 2 * kLayer);
  }

  // odd needs room: the pooled block is released first (one free), then
  // the backend refuses the allocation. Nothing resident was evicted and
  // nothing is held for the failed page-in.
  const ResidencyStats before = paged->stats();
  faulty.fail_nth(FaultOp::allocate, 1, FaultInjectingBackend::Fault::once,
                  make_error(ErrorCode::device_error, "injected device error"));
  auto failed = paged->pin(f.odd);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().code == ErrorCode::device_error);
  CHECK(faulty.calls(FaultOp::free) == 1);
  faulty.disarm();
  ResidencyStats s = paged->stats();
  CHECK(s.source_evictions == before.source_evictions);
  CHECK(s.pooled_bytes == 0);
  CHECK(s.device_bytes == 3 * kLayer);
  check_accounting(*paged, faulty, base);

  // Retried, both succeed, and every value is its file's.
  pin_and_check(f, *paged, faulty, f.odd);
  pin_and_check(f, *paged, faulty, f.layers[3]);
  for (ValueId id : f.layers) pin_and_check(f, *paged, faulty, id);
  check_accounting(*paged, faulty, base);
  CHECK(paged->release(faulty).status.ok());
  CHECK(faulty.counters().live_allocations == 0);
}

TEST_CASE("paging_pool: the same size after a failed copy takes the pooled block") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  FaultInjectingBackend faulty(conformance::gpu());
  auto paged = f.open(faulty, ResidencyStrategy::paged, 4 * kLayer);
  faulty.fail_nth(FaultOp::copy_to_device, 1);
  REQUIRE_FALSE(paged->pin(f.layers[0]).ok());
  faulty.disarm();
  faulty.reset_counts();
  pin_and_check(f, *paged, faulty, f.layers[0]);  // the retry reuses the block
  CHECK(faulty.calls(FaultOp::allocate) == 0);
  CHECK(paged->stats().pool_hits == 1);
  CHECK(paged->stats().pooled_bytes == 0);
  CHECK(paged->release(faulty).status.ok());
}

TEST_CASE("paging_pool: set_budget lowered evicts down to it, in the policy's order; values stay their files'") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  FaultInjectingBackend counting(conformance::gpu());
  const std::uint64_t base = counting.counters().live_bytes;
  auto paged = f.open(counting, ResidencyStrategy::paged, 4 * kLayer);
  for (int i = 0; i < 4; ++i) pin_and_check(f, *paged, counting, f.layers[i]);
  REQUIRE(paged->stats().device_bytes == 4 * kLayer);
  REQUIRE(paged->set_budget(2 * kLayer).ok());
  CHECK(paged->budget() == 2 * kLayer);
  ResidencyStats s = paged->stats();
  CHECK(s.budget_bytes == 2 * kLayer);
  CHECK(s.device_bytes == 2 * kLayer);  // two evicted and given back, not pooled
  CHECK(s.pooled_bytes == 0);
  CHECK(s.source_evictions == 2);
  CHECK(s.device_bytes == counting.counters().live_bytes - base);
  // The walk goes on under the new budget, never above it.
  for (int round = 0; round < 2; ++round)
    for (ValueId id : f.layers) {
      pin_and_check(f, *paged, counting, id);
      CHECK(paged->stats().device_bytes <= 2 * kLayer);
      CHECK(paged->stats().device_bytes == counting.counters().live_bytes - base);
    }
  // Raised again: room for more, nothing evicted for it.
  const std::uint64_t evicted = paged->stats().source_evictions;
  REQUIRE(paged->set_budget(5 * kLayer).ok());
  CHECK(paged->stats().source_evictions == evicted);
  for (int i = 0; i < 3; ++i) pin_and_check(f, *paged, counting, f.layers[i]);
  check_accounting(*paged, counting, base);
  // Unlimited, then bounded again: the bound a later call sets holds.
  REQUIRE(paged->set_budget(kUnlimitedBudget).ok());
  for (ValueId id : f.layers) pin_and_check(f, *paged, counting, id);
  CHECK(paged->stats().device_bytes == Uniform::kLayers * kLayer);
  REQUIRE(paged->set_budget(3 * kLayer).ok());
  CHECK(paged->stats().device_bytes == 3 * kLayer);
  CHECK(paged->stats().device_bytes == counting.counters().live_bytes - base);
  CHECK(paged->release(counting).status.ok());
  CHECK(paged->set_budget(4 * kLayer).code() == ErrorCode::invalid_argument);  // after release()
}

TEST_CASE("paging_pool: set_budget refused leaves the budget and everything resident as they were") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  auto& gpu = conformance::gpu();
  auto paged = f.open(gpu, ResidencyStrategy::paged, 4 * kLayer);
  // Below the largest pin (one layer): refused as create() would, naming it.
  auto small = paged->set_budget(kLayer - 1);
  REQUIRE(small.code() == ErrorCode::invalid_argument);
  CHECK_MESSAGE(small.error().to_string().find("16384 bytes that weight 'layer") != std::string::npos,
                small.error().to_string());
  // Three layers pinned and one resident unpinned: two layers' budget
  // cannot hold the pins, so nothing is evicted for it.
  auto p0 = paged->pin(f.layers[0]);
  auto p1 = paged->pin(f.layers[1]);
  auto p2 = paged->pin(f.layers[2]);
  REQUIRE((p0.ok() && p1.ok() && p2.ok()));
  pin_and_check(f, *paged, gpu, f.layers[3]);
  const ResidencyStats before = paged->stats();
  auto refused = paged->set_budget(2 * kLayer);
  REQUIRE(refused.code() == ErrorCode::out_of_memory);
  CHECK_MESSAGE(refused.error().to_string().find("49152 bytes pinned") != std::string::npos,
                refused.error().to_string());
  const ResidencyStats after = paged->stats();
  CHECK(after.source_evictions == before.source_evictions);
  CHECK(after.device_bytes == before.device_bytes);
  CHECK(paged->budget() == 4 * kLayer);
  // Exactly what the pins hold: layer3 goes, the pins stay.
  REQUIRE(paged->set_budget(3 * kLayer).ok());
  CHECK(paged->stats().device_bytes == 3 * kLayer);
  CHECK(read(gpu, *p0) == f.file.at(f.layers[0]));
  p0->reset();
  p1->reset();
  p2->reset();
  CHECK(paged->release(gpu).status.ok());

  // A residency created without a budget has nothing to change.
  auto uploaded = f.open(gpu, ResidencyStrategy::upload, std::nullopt);
  CHECK(uploaded->set_budget(4 * kLayer).code() == ErrorCode::invalid_argument);
  CHECK(uploaded->release(gpu).status.ok());
}

TEST_CASE("paging_pool: a raised budget lets a group waiting for room in at once") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  auto& gpu = conformance::gpu();
  auto paged = f.open(gpu, ResidencyStrategy::paged, 2 * kLayer);
  auto held = paged->pin(f.layers[0]);  // pinned for the whole test: only a raise makes room
  REQUIRE(held.ok());
  ResidencyGroup group;
  group.name = "layers 1 and 2";
  group.weights = {f.layers[1], f.layers[2]};
  std::atomic<bool> done{false};
  Result<PinnedSet> waited = make_error(ErrorCode::internal, "not run");
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    waited = paged->pin(group, std::chrono::milliseconds(30000));
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(done.load());  // waiting: the group cannot fit beside the pin
  REQUIRE(paged->set_budget(3 * kLayer).ok());
  waiter.join();
  REQUIRE_MESSAGE(waited.ok(), waited.status().to_string());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));  // not the deadline
  waited->reset();
  held->reset();
  CHECK(paged->release(gpu).status.ok());
}

TEST_CASE("paging_pool: set_budget with the backend refusing frees: refused, the bytes held as stuck, asked again") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  FaultInjectingBackend faulty(conformance::gpu());
  const std::uint64_t base = faulty.counters().live_bytes;
  auto paged = f.open(faulty, ResidencyStrategy::paged, 4 * kLayer);
  for (int i = 0; i < 4; ++i) pin_and_check(f, *paged, faulty, f.layers[i]);
  // Every free refused from the first on: the evictions cannot give
  // anything back, so the lowering fails with the budget as it was.
  faulty.fail_nth(FaultOp::free, 1, FaultInjectingBackend::Fault::op_from_then_on);
  auto refused = paged->set_budget(2 * kLayer);
  REQUIRE(refused.code() == ErrorCode::out_of_memory);
  CHECK_MESSAGE(refused.error().to_string().find("frees the device refused") != std::string::npos,
                refused.error().to_string());
  CHECK(paged->budget() == 4 * kLayer);
  CHECK(paged->stats().stuck_bytes > 0);
  CHECK(paged->stats().device_bytes == faulty.counters().live_bytes - base);
  // The device takes frees again: the same call asks the stuck ones first
  // and goes through; every value still pins as its file holds it.
  faulty.disarm();
  REQUIRE(paged->set_budget(2 * kLayer).ok());
  CHECK(paged->stats().stuck_bytes == 0);
  CHECK(paged->stats().device_bytes <= 2 * kLayer);
  for (ValueId id : f.layers) pin_and_check(f, *paged, faulty, id);
  CHECK(paged->stats().device_bytes == faulty.counters().live_bytes - base);
  CHECK(paged->release(faulty).status.ok());
  CHECK(faulty.counters().live_allocations == 0);
}

TEST_CASE("paging_pool: a budget lowered under a waiting group's size fails the group at once, not at its deadline") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  auto& gpu = conformance::gpu();
  auto paged = f.open(gpu, ResidencyStrategy::paged, 4 * kLayer);
  // Two layers pinned for the whole test: the group of three waits for room.
  auto p0 = paged->pin(f.layers[0]);
  auto p1 = paged->pin(f.layers[1]);
  REQUIRE((p0.ok() && p1.ok()));
  ResidencyGroup group;
  group.name = "layers 2 to 4";
  group.weights = {f.layers[2], f.layers[3], f.layers[4]};
  std::atomic<bool> done{false};
  Result<PinnedSet> waited = make_error(ErrorCode::internal, "not run");
  std::thread waiter([&] {
    waited = paged->pin(group, std::chrono::milliseconds(30000));
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(done.load());
  // Two layers: the pins fit exactly, the group of three never can.
  REQUIRE(paged->set_budget(2 * kLayer).ok());
  const auto lowered = std::chrono::steady_clock::now();
  while (!done.load() && std::chrono::steady_clock::now() - lowered < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(done.load());  // woken by the lowering, the pins still held
  p0->reset();
  p1->reset();
  waiter.join();
  REQUIRE(waited.status().code() == ErrorCode::out_of_memory);
  CHECK_MESSAGE(waited.status().to_string().find("more than the budget of 32768 bytes") != std::string::npos,
                waited.status().to_string());
  CHECK(paged->stats().pinned_bytes == 0);
  CHECK(paged->release(gpu).status.ok());
}

TEST_CASE("paging_pool: set_budget lowered and raised while threads pin, unpin and prefetch: the accounting holds") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  FaultInjectingBackend counting(conformance::gpu());
  const std::uint64_t base = counting.counters().live_bytes;
  auto paged = f.open(counting, ResidencyStrategy::paged, 6 * kLayer);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; !stop.load(); ++i) {
        const ValueId id = f.layers[static_cast<std::size_t>((i + 3 * t) % Uniform::kLayers)];
        if (i % 5 == 0) {
          paged->prefetch(std::span(&id, 1));
          continue;
        }
        auto p = paged->pin(id);
        if (p.ok()) {
          if (read(counting, *p) != f.file.at(id)) ++failures;
        } else if (p.status().code() != ErrorCode::out_of_memory) {
          ++failures;
        }
      }
    });
  const std::uint64_t budgets[] = {3 * kLayer, 6 * kLayer, kLayer * 4, kUnlimitedBudget, 3 * kLayer, 5 * kLayer};
  for (int round = 0; round < 40; ++round) {
    const std::uint64_t b = budgets[round % 6];
    const Status s = paged->set_budget(b);
    if (s.ok()) {
      CHECK(paged->budget() == b);
    } else {
      CHECK_MESSAGE(s.code() == ErrorCode::out_of_memory, s.to_string());
    }
    const ResidencyStats st = paged->stats();
    CHECK(st.device_bytes <= st.budget_bytes);
    CHECK(st.pooled_bytes + st.pinned_bytes <= st.device_bytes);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  for (auto& t : threads) t.join();
  paged->wait_for_prefetches();
  CHECK(failures.load() == 0);
  REQUIRE(paged->set_budget(2 * kLayer).ok());
  const ResidencyStats st = paged->stats();
  CHECK(st.device_bytes <= 2 * kLayer);
  CHECK(st.pinned_bytes == 0);
  CHECK(st.device_bytes == counting.counters().live_bytes - base);
  CHECK(paged->release(counting).status.ok());
  CHECK(counting.counters().live_bytes == base);
}

// An engine that starts unbounded and bounds its weights later (a KV cache
// that grows): an explicit kUnlimitedBudget at create() is a budget
// set_budget() may change, as one it lifted itself is.
TEST_CASE("paging_pool: a residency created with kUnlimitedBudget takes a bound from set_budget") {
  conformance::LeakCheck leaks;
  PoolFixture f;
  FaultInjectingBackend counting(conformance::gpu());
  const std::uint64_t base = counting.counters().live_bytes;
  auto paged = f.open(counting, ResidencyStrategy::paged, kUnlimitedBudget);
  CHECK(paged->budget() == kUnlimitedBudget);
  for (ValueId id : f.layers) pin_and_check(f, *paged, counting, id);
  REQUIRE(paged->stats().device_bytes == Uniform::kLayers * kLayer);
  // The minimum create() would have refused holds as for any budget.
  CHECK(paged->set_budget(kLayer - 1).code() == ErrorCode::invalid_argument);
  CHECK(paged->budget() == kUnlimitedBudget);
  const Status bounded = paged->set_budget(3 * kLayer);
  REQUIRE_MESSAGE(bounded.ok(), bounded.to_string());
  CHECK(paged->budget() == 3 * kLayer);
  CHECK(paged->stats().device_bytes == 3 * kLayer);
  CHECK(paged->stats().device_bytes == counting.counters().live_bytes - base);
  for (ValueId id : f.layers) pin_and_check(f, *paged, counting, id);
  CHECK(paged->stats().device_bytes <= 3 * kLayer);
  CHECK(paged->release(counting).status.ok());

  // Upload with an explicit unlimited budget: sized too, so a bound below
  // what stays (every weight) is refused as create() would refuse it, and
  // the whole footprint is taken.
  auto uploaded = f.open(counting, ResidencyStrategy::upload, kUnlimitedBudget);
  for (ValueId id : f.layers) pin_and_check(f, *uploaded, counting, id);
  const Status below = uploaded->set_budget(4 * kLayer);
  CHECK(below.code() == ErrorCode::invalid_argument);
  CHECK_MESSAGE(below.to_string().find("stay on the device once placed") != std::string::npos, below.to_string());
  std::uint64_t all = 0;
  for (const auto& [id, w] : f.model.store().weights()) all += w.byte_length();
  const Status whole = uploaded->set_budget(all);
  CHECK_MESSAGE(whole.ok(), whole.to_string());
  CHECK(uploaded->budget() == all);
  CHECK(uploaded->release(counting).status.ok());
}
