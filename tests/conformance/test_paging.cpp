// Residency strategies on the backend under test (issue 17): upload,
// zero_copy and paged give byte-identical weights and derived values;
// paged stays within its budget, evicts, and never serves a stale pointer;
// its accounting equals the allocator's live bytes; pins are never evicted
// and a request that cannot fit beside them fails with out_of_memory; many
// threads pin and evict at once. Model: the orphaned-prefix model
// (tests/support/orphaned_prefix_model.hpp: 3 weights, 5 derivations).
#include "conformance/paging_fixture.hpp"

#include <ballast/derive.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <atomic>
#include <latch>
#include <mutex>
#include <map>
#include <random>
#include <string>
#include <thread>

using namespace ballast;
using Model_ = conformance::OrphanedPrefix;
using conformance::kLargestNeed;
using Fixture = conformance::PagingFixture;

namespace {

std::vector<std::byte> read_pinned(const Pinned& p, const PlannedDerivation* d) {
  if (d == nullptr) return conformance::download(p.first(), p.bytes());
  DerivationLaunch l = d->launch;
  auto sizes = derivation_sizes(l);
  REQUIRE(sizes.ok());
  auto out = conformance::download(p.first(), sizes->dst_bytes);
  if (sizes->dst2_bytes != 0) {
    auto second = conformance::download(p.second(), sizes->dst2_bytes);
    out.insert(out.end(), second.begin(), second.end());
  }
  return out;
}

// Every weight and every derived value, by name, read through `r`.
std::map<std::string, std::vector<std::byte>> everything(Fixture& f, Residency& r, int rounds = 1) {
  std::map<std::string, std::vector<std::byte>> out;
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < f.plan.size(); ++i) {
      const PlannedDerivation& d = f.plan[round % 2 ? f.plan.size() - 1 - i : i];
      auto p = r.pin(d);
      REQUIRE_MESSAGE(p.ok(), p.status().to_string());
      auto bytes = read_pinned(*p, &d);
      const std::string key = std::string(derivation_name(d.kind())) + " " + d.weight;
      if (round == 0) out[key] = bytes;
      else CHECK_MESSAGE(out[key] == bytes, key << " changed in round " << round);
    }
    for (ValueId id : f.model.weight_order()) {
      auto p = r.pin(id);
      REQUIRE_MESSAGE(p.ok(), p.status().to_string());
      auto bytes = read_pinned(*p, nullptr);
      const std::string key(f.model.value_name(id));
      if (round == 0) out[key] = bytes;
      else CHECK_MESSAGE(out[key] == bytes, key << " changed in round " << round);
    }
  }
  return out;
}

// w0's planned derivation of `kind`, or null.
const PlannedDerivation* of_w0(const Fixture& f, Derivation kind) {
  for (const PlannedDerivation& d : f.plan)
    if (d.weight == "w0" && d.kind() == kind) return &d;
  return nullptr;
}

}  // namespace

TEST_CASE("paging: every strategy gives byte-identical weights and derived values") {
  conformance::LeakCheck leaks;
  Fixture f;
  auto upload = f.open(ResidencyStrategy::upload);
  const auto reference = everything(f, *upload, 2);
  REQUIRE(reference.size() == Model_::kDerivations + 3);
  CHECK(upload->stats().host_copy_bytes == 0);
  CHECK(upload->stats().uploaded_bytes == Model_::kReferenced);
  CHECK(upload->release(conformance::gpu()).status.ok());

  auto zero_copy = f.open(ResidencyStrategy::zero_copy);
  CHECK(everything(f, *zero_copy) == reference);
  CHECK(zero_copy->stats().host_copy_bytes == 0);  // uploads (fallbacks) go straight from the mapping too
  CHECK(zero_copy->release(conformance::gpu()).status.ok());

  for (std::uint64_t budget : {Model_::kReferenced + Model_::kDerived, kLargestNeed + 4096, kLargestNeed}) {
    CAPTURE(budget);
    auto paged = f.open(ResidencyStrategy::paged, budget);
    CHECK(everything(f, *paged, 3) == reference);
    const ResidencyStats s = paged->stats();
    CHECK(s.peak_device_bytes <= budget);
    CHECK(s.host_copy_bytes == 0);
    CHECK(s.pinned_bytes == 0);
    if (budget < Model_::kReferenced + Model_::kDerived) {
      CHECK(s.source_evictions + s.derived_evictions > 0);
      CHECK(s.derived_rebuilds > 0);
    } else {
      CHECK(s.source_evictions + s.derived_evictions == 0);
      CHECK(s.derived_builds == Model_::kDerivations);
    }
    CHECK(paged->release(conformance::gpu()).status.ok());
  }
}

TEST_CASE("paging: residency's derived values are derive_weights()' values, byte for byte") {
  conformance::LeakCheck leaks;
  Fixture f;
  // The one-call derive path, checked against the CPU reference by the
  // derivations suite.
  std::map<std::string, std::vector<std::byte>> expected;
  {
    DeviceWeights sources(conformance::gpu(), f.model.store());
    DerivedWeights memo;
    const DeriveContext ctx{conformance::gpu(), f.model, sources, memo};
    auto values = derive_weights(ctx, f.plan);
    REQUIRE_MESSAGE(values.ok(), values.status().to_string());
    for (std::size_t i = 0; i < f.plan.size(); ++i) {
      const PlannedDerivation& d = f.plan[i];
      DerivationLaunch l = d.launch;
      auto sizes = derivation_sizes(l);
      REQUIRE(sizes.ok());
      auto bytes = conformance::download((*values)[i].first, sizes->dst_bytes);
      if (sizes->dst2_bytes != 0) {
        auto second = conformance::download((*values)[i].second, sizes->dst2_bytes);
        bytes.insert(bytes.end(), second.begin(), second.end());
      }
      expected[std::string(derivation_name(d.kind())) + " " + d.weight] = std::move(bytes);
    }
    CHECK(memo.release(conformance::gpu()).status.ok());
    CHECK(sources.release(conformance::gpu()).status.ok());
  }
  auto paged = f.open(ResidencyStrategy::paged, kLargestNeed);
  const auto got = everything(f, *paged, 2);
  for (const auto& [key, bytes] : expected) CHECK_MESSAGE(got.at(key) == bytes, key);
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging: auto is the referenced sources plus the derivations, never the orphaned prefix") {
  Fixture f;
  auto paged = f.open(ResidencyStrategy::paged);
  CHECK(paged->budget() == Model_::kReferenced + Model_::kDerived);
  auto upload = f.open(ResidencyStrategy::upload);
  CHECK(upload->budget() == kUnlimitedBudget);
}

TEST_CASE("paging: the budget's accounting equals the allocator's live bytes") {
  conformance::LeakCheck leaks;
  Fixture f;
  const std::uint64_t before = conformance::gpu().counters().live_bytes;
  auto paged = f.open(ResidencyStrategy::paged, kLargestNeed + 8192);
  std::vector<Pinned> held;
  for (const PlannedDerivation& d : f.plan) {
    auto p = paged->pin(d);
    REQUIRE_MESSAGE(p.ok(), p.status().to_string());
    CHECK(paged->stats().device_bytes == conformance::gpu().counters().live_bytes - before);
    if (d.kind() == Derivation::quant_int8) held.push_back(std::move(*p));  // pinned, small
  }
  CHECK(paged->stats().pinned_bytes > 0);
  held.clear();
  CHECK(paged->stats().pinned_bytes == 0);
  CHECK(paged->stats().device_bytes == conformance::gpu().counters().live_bytes - before);
  const Released r = paged->release(conformance::gpu());
  CHECK(r.status.ok());
  CHECK(conformance::gpu().counters().live_bytes == before);
}

TEST_CASE("paging: a pinned entry is never evicted; a request that cannot fit beside the pins is out_of_memory") {
  conformance::LeakCheck leaks;
  Fixture f;
  auto paged = f.open(ResidencyStrategy::paged, kLargestNeed);
  const PlannedDerivation* transpose = of_w0(f, Derivation::transpose);
  const PlannedDerivation* to_f16 = of_w0(f, Derivation::to_f16);
  REQUIRE(transpose);
  REQUIRE(to_f16);
  auto t = paged->pin(*transpose);
  REQUIRE(t.ok());
  const auto t_bytes = read_pinned(*t, transpose);
  // to_f16 of w0 needs w0 (24576) and its output (12288) beside the pinned
  // transpose (24576): w0 is pinned for the build, then its output does
  // not fit: 61440 > 49152.
  auto refused = paged->pin(*to_f16);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::out_of_memory);
  const std::string message = refused.status().to_string();
  CHECK_MESSAGE(message.find("budget of 49152 bytes") != std::string::npos, message);
  CHECK_MESSAGE(message.find("49152 bytes pinned") != std::string::npos, message);
  CHECK_MESSAGE(message.find("cannot take 12288 bytes for to_f16 of 'w0'") != std::string::npos, message);
  CHECK(paged->stats().pinned_bytes == Model_::kW0Bytes);  // the build's pin of w0 is gone again
  CHECK(read_pinned(*t, transpose) == t_bytes);  // still resident, still right
  CHECK(paged->stats().peak_device_bytes <= kLargestNeed);
  t->reset();
  auto now = paged->pin(*to_f16);
  CHECK_MESSAGE(now.ok(), now.status().to_string());
  now->reset();
  CHECK(paged->release(conformance::gpu()).status.ok());
}

// A single request never waits for a pin to go, so one that cannot fit
// beside the pins fails before it evicts anything: evicting every unpinned
// entry first (as it did) emptied the device for nothing.
TEST_CASE("paging: a request that cannot fit beside the pins evicts nothing before it fails") {
  conformance::LeakCheck leaks;
  Fixture f;
  const std::uint64_t budget = kLargestNeed + Model_::kW2Bytes;
  auto paged = f.open(ResidencyStrategy::paged, budget);
  const PlannedDerivation* transpose = of_w0(f, Derivation::transpose);
  const PlannedDerivation* to_f16 = of_w0(f, Derivation::to_f16);
  REQUIRE(transpose);
  REQUIRE(to_f16);
  auto t = paged->pin(*transpose);  // pinned; w0 stays resident, unpinned
  REQUIRE(t.ok());
  REQUIRE(paged->pin("w2").ok());  // resident, unpinned once the pin goes
  const ResidencyStats before = paged->stats();
  REQUIRE(before.device_bytes == budget);
  // to_f16 of w0 pins w0 for its build (24576 + the transpose's 24576
  // pinned) and needs 12288 more: past the budget whatever goes.
  auto refused = paged->pin(*to_f16);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::out_of_memory);
  const ResidencyStats after = paged->stats();
  CHECK(after.source_evictions == before.source_evictions);
  CHECK(after.derived_evictions == before.derived_evictions);
  CHECK(after.device_bytes == before.device_bytes);  // w2 (and w0) still resident
  CHECK(after.pinned_bytes == before.pinned_bytes);
  t->reset();
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging: a source paged in only to build a value is evicted before the value it built") {
  // w0 comes in as the transpose's dependency and nobody asked for it: it
  // is the first victim when w2 needs room, not the transpose (the newer
  // entry, and the one the engine asked for).
  conformance::LeakCheck leaks;
  Fixture f;
  auto paged = f.open(ResidencyStrategy::paged, kLargestNeed);
  const PlannedDerivation* transpose = of_w0(f, Derivation::transpose);
  REQUIRE(transpose);
  ValueId w2{};
  for (ValueId id : f.model.weight_order())
    if (f.model.value_name(id) == "w2") w2 = id;
  {
    auto t = paged->pin(*transpose);
    REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  }
  CHECK(paged->stats().device_bytes == 2 * Model_::kW0Bytes);  // w0 and its transpose: the whole budget
  {
    auto w = paged->pin(w2);
    REQUIRE_MESSAGE(w.ok(), w.status().to_string());
  }
  const ResidencyStats s = paged->stats();
  CHECK(s.source_evictions == 1);
  CHECK(s.derived_evictions == 0);
  // The transpose is still resident: pinning it again builds nothing.
  const std::uint64_t builds = s.derived_builds;
  {
    auto t = paged->pin(*transpose);
    REQUIRE(t.ok());
  }
  CHECK(paged->stats().derived_builds == builds);
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging: a budget below the largest single need is refused at create") {
  Fixture f;
  ResidencyOptions o;
  o.strategy = ResidencyStrategy::paged;
  o.budget_bytes = kLargestNeed - 1;
  auto r = Residency::create(conformance::gpu(), f.model, o);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(r.status().to_string().find("49152 bytes") != std::string::npos, r.status().to_string());
}

TEST_CASE("paging: prefetched entries are resident when pinned") {
  conformance::LeakCheck leaks;
  Fixture f;
  auto paged = f.open(ResidencyStrategy::paged);
  paged->prefetch(f.plan);
  paged->wait_for_prefetches();
  const ResidencyStats before = paged->stats();
  CHECK(before.prefetches == Model_::kDerivations);
  for (const PlannedDerivation& d : f.plan) REQUIRE(paged->pin(d).ok());
  const ResidencyStats after = paged->stats();
  CHECK(after.derived_builds == before.derived_builds);
  CHECK(after.page_ins == before.page_ins);
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging: many threads pin, evict and prefetch at once; every value read is right") {
  conformance::LeakCheck leaks;
  Fixture f;
  std::map<std::string, std::vector<std::byte>> reference;
  {
    auto upload = f.open(ResidencyStrategy::upload);
    reference = everything(f, *upload);
    CHECK(upload->release(conformance::gpu()).status.ok());
  }
  const std::uint64_t before = conformance::gpu().counters().live_bytes;
  auto paged = f.open(ResidencyStrategy::paged, kLargestNeed + 8192);
  std::atomic<int> good{0}, refused{0}, wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      for (int i = 0; i < 60; ++i) {
        const std::size_t k = rng() % (f.plan.size() + 1);
        if (k == f.plan.size()) {
          paged->prefetch(std::span(f.plan).subspan(rng() % f.plan.size(), 1));
          continue;
        }
        const PlannedDerivation& d = f.plan[k];
        auto p = paged->pin(d);
        if (!p.ok()) {
          (p.error().code == ErrorCode::out_of_memory ? refused : failed)++;
          continue;
        }
        const auto bytes = read_pinned(*p, &d);
        (bytes == reference[std::string(derivation_name(d.kind())) + " " + d.weight] ? good : wrong)++;
      }
    });
  }
  for (auto& t : threads) t.join();
  paged->wait_for_prefetches();
  CHECK(wrong == 0);
  CHECK(failed == 0);
  CHECK(good > 0);
  const ResidencyStats s = paged->stats();
  MESSAGE("good " << good.load() << ", refused (all pinned) " << refused.load() << ", evictions "
                  << s.source_evictions + s.derived_evictions);
  CHECK(s.peak_device_bytes <= kLargestNeed + 8192);
  CHECK(s.source_evictions + s.derived_evictions > 0);
  CHECK(s.pinned_bytes == 0);
  CHECK(s.device_bytes == conformance::gpu().counters().live_bytes - before);
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging: threads missing one entry together load it once") {
  conformance::LeakCheck leaks;
  Fixture f;
  auto paged = f.open(ResidencyStrategy::paged);
  const PlannedDerivation& d = f.plan.front();
  std::latch start(8);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  std::vector<std::byte> first;
  std::mutex first_mutex;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      auto p = paged->pin(d);
      if (!p.ok()) return;
      auto bytes = read_pinned(*p, &d);
      std::lock_guard lock(first_mutex);
      if (first.empty()) first = bytes;
      if (bytes == first) ++good;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(good == 8);
  const ResidencyStats s = paged->stats();
  CHECK(s.derived_builds == 1);
  CHECK(s.page_ins == 1);  // its one source
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging: per-weight strategies: an uploaded weight in a paged model is never evicted") {
  conformance::LeakCheck leaks;
  Fixture f;
  ResidencyOptions o;
  o.strategy = ResidencyStrategy::paged;
  // w2 and its derived values (which follow its strategy) stay: 4096 +
  // 4096 + 2176 bytes beside the largest need of the paged rest.
  o.budget_bytes = kLargestNeed + 16384;
  const ValueId w2 = *f.model.value_id("w2");
  o.overrides = {{w2, ResidencyStrategy::upload}};
  {
    // w2's kept 10368 bytes leave too little beside the largest need.
    ResidencyOptions tight = o;
    tight.budget_bytes = kLargestNeed + 4096;
    auto refused = Residency::create(conformance::gpu(), f.model, tight);
    REQUIRE_FALSE(refused.ok());
    CHECK_MESSAGE(refused.status().to_string().find("beside the 10368 bytes that stay on the device once placed") !=
                      std::string::npos,
                  refused.status().to_string());
  }
  auto r = Residency::create(conformance::gpu(), f.model, o);
  REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  Residency& paged = **r;
  CHECK(paged.strategy_of(w2) == ResidencyStrategy::upload);
  CHECK(paged.strategy_of(*f.model.value_id("w0")) == ResidencyStrategy::paged);
  auto pinned = paged.pin(w2);
  REQUIRE(pinned.ok());
  const DevicePtr where = pinned->first();
  pinned->reset();
  // Everything else, twice, through a budget that has to evict to fit it.
  for (int round = 0; round < 2; ++round)
    for (const PlannedDerivation& d : f.plan) {
      auto p = paged.pin(d);
      REQUIRE_MESSAGE(p.ok(), p.status().to_string());
    }
  const ResidencyStats s = paged.stats();
  CHECK(s.source_evictions + s.derived_evictions > 0);
  CHECK(s.uploaded_bytes == Model_::kW2Bytes);  // once
  auto again = paged.pin(w2);
  REQUIRE(again.ok());
  CHECK(again->first() == where);  // the same upload, never evicted
  again->reset();
  CHECK(paged.release(conformance::gpu()).status.ok());

}

TEST_CASE("paging: release with values still pinned frees them and says so") {
  conformance::LeakCheck leaks;
  Fixture f;
  auto paged = f.open(ResidencyStrategy::paged);
  auto held = paged->pin(f.plan.front());
  REQUIRE(held.ok());
  const Released r = paged->release(conformance::gpu());
  REQUIRE_FALSE(r.status.ok());
  CHECK(r.status.code() == ErrorCode::invalid_argument);
  CHECK_MESSAGE(r.status.to_string().find("1 value(s) still pinned") != std::string::npos, r.status.to_string());
  CHECK(r.failed_frees == 0);
  held->reset();  // harmless: the object still lives, the entry is gone
  CHECK(paged->release(conformance::gpu()).status.ok());
}
