// Residency's groups on the backend under test (issue 25 §2): pin(group)
// pins every member or none, waits for room up to its deadline and no
// longer, and two threads whose groups do not fit together take turns
// without deadlock or overshoot; create() refuses a budget below what the
// largest group needs. Model: the orphaned-prefix model
// (tests/support/orphaned_prefix_model.hpp), budgets exact from its sizes.
#include "support/text.hpp"
#include "conformance/paging_fixture.hpp"

#include <ballast/derive.hpp>
#include <ballast/residency.hpp>

#include <support/fault_injecting_backend.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

using namespace ballast;
using namespace std::chrono_literals;
using Model_ = conformance::OrphanedPrefix;
using ballast::testing::FaultInjectingBackend;
using ballast::testing::FaultOp;
using conformance::kLargestNeed;

namespace {

constexpr std::uint64_t kTransposeW0 = 24576, kToF16W0 = 12288, kQuantW0 = 6144 + 256;
constexpr std::uint64_t kTransposeW2 = 4096, kQuantW2 = 2048 + 128;

// The paging fixture, plus groups made by hand from its plan.
struct GroupsFixture : conformance::PagingFixture {
  const PlannedDerivation& planned(std::string_view weight, Derivation kind) const {
    for (const PlannedDerivation& d : plan)
      if (d.weight == weight && d.kind() == kind) return d;
    FAIL("no " << derivation_name(kind) << " of " << weight << " planned");
    return plan.front();
  }
  ResidencyGroup group(std::string name, std::initializer_list<std::pair<std::string_view, Derivation>> derived,
                       std::initializer_list<std::string_view> weights = {}) const {
    ResidencyGroup g;
    g.name = std::move(name);
    for (auto [w, k] : derived) g.derivations.push_back(planned(w, k));
    for (std::string_view w : weights) g.weights.push_back(*model.value_id(w));
    return g;
  }
  std::unique_ptr<Residency> open(std::uint64_t budget) { return PagingFixture::open(ResidencyStrategy::paged, budget); }
  std::unique_ptr<Residency> open(GpuBackend& gpu, std::uint64_t budget) {
    ResidencyOptions o;
    o.strategy = ResidencyStrategy::paged;
    o.budget_bytes = budget;
    auto r = Residency::create(gpu, model, o);
    REQUIRE_MESSAGE(r.ok(), r.status().to_string());
    return std::move(*r);
  }
};

using ballast::testing::contains;

}  // namespace

TEST_CASE("paging groups: a member that cannot be had leaves nothing of its group pinned") {
  conformance::LeakCheck leaks;
  GroupsFixture f;
  const std::uint64_t live_before = conformance::gpu().counters().live_bytes;
  auto paged = f.open(kLargestNeed);
  auto t = paged->pin(f.planned("w0", Derivation::transpose));
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());

  // Room beside the transpose for both outputs (24576 + 6400 + 12288 <=
  // 49152), so the attempt is made: quant_int8 reads the pinned copy and is
  // pinned, then to_f16 needs w0 itself paged in beside them (24576 more):
  // refused mid-set, and the quant_int8 pin is given back.
  const ResidencyGroup mid = f.group("w0 encodings", {{"w0", Derivation::quant_int8}, {"w0", Derivation::to_f16}});
  auto refused = paged->pin(mid);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::out_of_memory);
  const std::string message = refused.status().to_string();
  CHECK_MESSAGE(contains(message, "budget of 49152 bytes cannot take group 'w0 encodings' (18688 bytes in 2 members)"),
                message);
  CHECK_MESSAGE(contains(message, "beside 24576 bytes pinned"), message);
  CHECK_MESSAGE(contains(message, "refused: out_of_memory"), message);  // the member's refusal: w0 for its to_f16
  CHECK_MESSAGE(contains(message, "weight 'w0'"), message);
  CHECK(paged->stats().pinned_bytes == kTransposeW0);            // only the transpose
  CHECK(paged->stats().device_bytes == conformance::gpu().counters().live_bytes - live_before);

  // Too much beside the pins to try at all: nothing is paged in, built or
  // pinned, so the stats are exactly as they were.
  const ResidencyGroup big = f.group("most", {{"w0", Derivation::quant_int8}, {"w0", Derivation::to_f16},
                                              {"w2", Derivation::transpose}, {"w2", Derivation::quant_int8}},
                                     {"w1", "w2"});
  const std::string before = paged->stats().to_string();
  auto not_tried = paged->pin(big);
  REQUIRE_FALSE(not_tried.ok());
  CHECK(not_tried.error().code == ErrorCode::out_of_memory);
  CHECK(paged->stats().to_string() == before);

  // The transpose released, the same group fits: every member pinned, each
  // half of a pair sized on its own.
  t->reset();
  auto set = paged->pin(mid);
  REQUIRE_MESSAGE(set.ok(), set.status().to_string());
  REQUIRE(set->derived.size() == 2);
  CHECK(set->derived[0].first_bytes() == 6144);  // quant_int8 codes [64 x 96]
  CHECK(set->derived[0].second_bytes() == 256);  // its float scales
  CHECK(set->derived[0].second() != 0);
  CHECK(set->derived[1].first_bytes() == kToF16W0);
  CHECK(set->derived[1].second_bytes() == 0);
  CHECK(set->bytes() == kQuantW0 + kToF16W0);
  CHECK(paged->stats().pinned_bytes == kQuantW0 + kToF16W0);
  set->reset();
  CHECK(paged->stats().pinned_bytes == 0);
  CHECK(paged->stats().peak_device_bytes <= kLargestNeed);
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging groups: a group larger than the whole budget fails at once") {
  conformance::LeakCheck leaks;
  GroupsFixture f;
  auto paged = f.open(kLargestNeed);
  const ResidencyGroup all = f.group("everything", {{"w0", Derivation::transpose}, {"w0", Derivation::to_f16},
                                                    {"w0", Derivation::quant_int8}});
  // 43264 bytes would fit, but building to_f16 beside the pinned transpose
  // cannot: with nothing else pinned there is nobody to wait for.
  const auto start = std::chrono::steady_clock::now();
  auto r = paged->pin(all, 10s);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::out_of_memory);
  CHECK_MESSAGE(contains(r.status().to_string(), "cannot take group 'everything' (43264 bytes in 3 members) beside "
                                                 "0 bytes pinned"),
                r.status().to_string());
  CHECK(paged->stats().pinned_bytes == 0);
  // Larger than the budget: refused before anything is tried.
  const ResidencyGroup huge = f.group("too big", {{"w0", Derivation::transpose}, {"w0", Derivation::to_f16},
                                                  {"w0", Derivation::quant_int8}},
                                      {"w0"});
  auto h = paged->pin(huge, 10s);
  REQUIRE_FALSE(h.ok());
  CHECK(h.error().code == ErrorCode::out_of_memory);
  CHECK_MESSAGE(contains(h.status().to_string(), "group 'too big' needs 67840 bytes pinned at once (4 members), "
                                                 "more than the budget of 49152 bytes"),
                h.status().to_string());
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging groups: the wait for room succeeds when another thread releases in time, fails when not") {
  conformance::LeakCheck leaks;
  GroupsFixture f;
  auto paged = f.open(kLargestNeed);
  const ResidencyGroup f16 = f.group("to_f16", {{"w0", Derivation::to_f16}});
  // Held by another thread for 150 ms: to_f16 (w0 + 12288 beside the
  // 24576 pinned) must wait for it, then succeed. Also "as long as it
  // takes": a wait past the clock's range waits too (it used to overflow
  // the deadline into the past and fail at once).
  for (const std::chrono::milliseconds wait :
       {std::chrono::milliseconds(20s), std::chrono::milliseconds::max(), std::chrono::milliseconds(1ll << 62)}) {
    CAPTURE(wait.count());
    {
      auto t = paged->pin(f.planned("w0", Derivation::transpose));
      REQUIRE(t.ok());
      std::thread holder([&] {
        std::this_thread::sleep_for(150ms);
        t->reset();
      });
      const auto start = std::chrono::steady_clock::now();
      auto got = paged->pin(f16, wait);
      const auto waited = std::chrono::steady_clock::now() - start;
      holder.join();
      REQUIRE_MESSAGE(got.ok(), got.status().to_string());
      CHECK(waited >= 100ms);
      CHECK(waited < 15s);
      CHECK(got->derived.at(0).first_bytes() == kToF16W0);
    }
    CHECK(paged->stats().pinned_bytes == 0);
  }
  {
    // Nobody releases: out_of_memory once the deadline has passed.
    auto t = paged->pin(f.planned("w0", Derivation::transpose));
    REQUIRE(t.ok());
    const auto start = std::chrono::steady_clock::now();
    auto got = paged->pin(f16, 200ms);
    CHECK(std::chrono::steady_clock::now() - start >= 200ms);
    REQUIRE_FALSE(got.ok());
    CHECK(got.error().code == ErrorCode::out_of_memory);
    const std::string message = got.status().to_string();
    CHECK_MESSAGE(contains(message, "budget of 49152 bytes cannot take group 'to_f16' (12288 bytes in 1 members) "
                                    "beside 24576 bytes pinned"),
                  message);
    CHECK_MESSAGE(contains(message, "after waiting 200 ms for pins to be released"), message);
    CHECK(paged->stats().pinned_bytes == kTransposeW0);
  }
  CHECK(paged->stats().pinned_bytes == 0);
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging groups: no attempt starts past the deadline, even when room came during the last one") {
  // The group's first attempt fails (the backend refuses w2's page-in
  // allocation, out of memory) while another thread releases a pin. A 0 ms
  // wait is one attempt: it fails, though a second would succeed (a wait
  // that retried whenever others had released could be held in its loop
  // for as long as they kept releasing and pinning again). A positive wait
  // tries again at once, since the room came before its deadline.
  for (const std::chrono::milliseconds wait : {0ms, std::chrono::milliseconds(20s)}) {
    CAPTURE(wait.count());
    conformance::LeakCheck leaks;
    GroupsFixture f;
    FaultInjectingBackend faulty(conformance::gpu());
    {
      auto paged = f.open(faulty, kLargestNeed);
      auto other = paged->pin("w1");
      REQUIRE_MESSAGE(other.ok(), other.status().to_string());
      const ResidencyGroup w2 = f.group("w2 transpose", {{"w2", Derivation::transpose}});
      // Allocations 1 and 2 fail: the first page-in of w2, then its retry
      // after w1 (unpinned by the other thread meanwhile) is evicted for it.
      // The third, a second attempt's, would succeed.
      int allocations = 0;
      faulty.before_call = [&](FaultOp op) {
        if (op != FaultOp::allocate) return;
        if (++allocations == 1) std::thread([&] { other->reset(); }).join();  // another thread's unpin
        if (allocations == 3) faulty.disarm();
      };
      faulty.fail_nth(FaultOp::allocate, 1, FaultInjectingBackend::Fault::op_from_then_on);
      auto got = paged->pin(w2, wait);
      faulty.disarm();
      faulty.before_call = nullptr;
      CHECK(faulty.injected().size() == 2);
      if (wait.count() == 0) {
        REQUIRE_FALSE(got.ok());
        CHECK(got.error().code == ErrorCode::out_of_memory);
        const std::string message = got.status().to_string();
        CHECK_MESSAGE(contains(message,
                               "cannot take group 'w2 transpose' (4096 bytes in 1 members) beside 0 bytes "
                               "pinned"),
                      message);
        CHECK_MESSAGE(contains(message, "(injected at call 2 of allocate)"), message);
        CHECK(allocations == 2);
        CHECK_FALSE(contains(message, "after waiting"));
        CHECK(paged->stats().pinned_bytes == 0);
      } else {
        REQUIRE_MESSAGE(got.ok(), got.status().to_string());
        CHECK(got->derived.at(0).first_bytes() == kTransposeW2);
        CHECK(allocations == 4);  // w2's page-in, then the transpose's output
        CHECK(paged->stats().pinned_bytes == kTransposeW2);
        got->reset();
      }
      CHECK(paged->release(faulty).status.ok());
    }
  }
}

TEST_CASE("paging groups: two threads whose groups do not fit together take turns, never overshooting") {
  conformance::LeakCheck leaks;
  GroupsFixture f;
  const std::uint64_t before = conformance::gpu().counters().live_bytes;
  auto paged = f.open(kLargestNeed);
  // a: 24576 bytes pinned; b: 29440. Each fits alone, not both (54016 >
  // 49152), so whichever comes second waits for the first to let go.
  const ResidencyGroup a = f.group("a", {{"w0", Derivation::transpose}});
  const ResidencyGroup b = f.group("b", {{"w0", Derivation::quant_int8}, {"w0", Derivation::to_f16},
                                         {"w2", Derivation::transpose}, {"w2", Derivation::quant_int8}},
                                   {"w2", "w1"});
  std::vector<std::byte> a_ref, b_ref;
  {
    auto pa = paged->pin(a);
    REQUIRE_MESSAGE(pa.ok(), pa.status().to_string());
    a_ref = conformance::download(pa->derived[0].first(), pa->derived[0].first_bytes());
    pa->reset();
    auto pb = paged->pin(b);
    REQUIRE_MESSAGE(pb.ok(), pb.status().to_string());
    CHECK(pb->bytes() == kQuantW0 + kToF16W0 + kTransposeW2 + kQuantW2 + Model_::kW2Bytes + Model_::kW1Bytes);
    b_ref = conformance::download(pb->derived[1].first(), pb->derived[1].first_bytes());
  }
  std::atomic<int> holding{0}, overlapped{0}, failed{0}, wrong{0};
  auto run = [&](const ResidencyGroup& g, const std::vector<std::byte>& ref, std::size_t which) {
    for (int i = 0; i < 25; ++i) {
      auto set = paged->pin(g, 30s);
      if (!set.ok()) {
        ++failed;
        MESSAGE(set.status().to_string());
        continue;
      }
      if (holding.fetch_add(1) != 0) ++overlapped;
      const Pinned& p = set->derived[which];
      if (conformance::download(p.first(), p.first_bytes()) != ref) ++wrong;
      std::this_thread::sleep_for(1ms);
      holding.fetch_sub(1);
      set->reset();
    }
  };
  std::thread ta([&] { run(a, a_ref, 0); });
  std::thread tb([&] { run(b, b_ref, 1); });
  ta.join();
  tb.join();
  CHECK(failed == 0);
  CHECK(wrong == 0);
  CHECK(overlapped == 0);  // both held at once would be 54016 bytes pinned under 49152
  const ResidencyStats s = paged->stats();
  CHECK(s.peak_device_bytes <= kLargestNeed);
  CHECK(s.pinned_bytes == 0);
  CHECK(s.device_bytes == conformance::gpu().counters().live_bytes - before);
  CHECK(paged->release(conformance::gpu()).status.ok());
}

TEST_CASE("paging groups: create() refuses a budget below the largest group, naming it") {
  GroupsFixture f;
  ResidencyOptions o;
  o.strategy = ResidencyStrategy::paged;
  o.budget_bytes = 60000;  // above the largest single need (49152)
  {
    auto r = Residency::create(conformance::gpu(), f.model, o);
    REQUIRE_MESSAGE(r.ok(), r.status().to_string());
  }
  // By node, mm0's group is w0's three encodings (43264 bytes) plus w0
  // itself while the transpose and to_f16 are built (24576): 67840.
  o.group_by = group_by_node();
  auto refused = Residency::create(conformance::gpu(), f.model, o);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(contains(refused.status().to_string(), "below the 67840 bytes that group 'mm0' (3 members pinned "
                                                       "together) needs on the device at once"),
                refused.status().to_string());
  o.budget_bytes = 67840;
  auto fits = Residency::create(conformance::gpu(), f.model, o);
  REQUIRE_MESSAGE(fits.ok(), fits.status().to_string());
  REQUIRE((*fits)->groups().size() == 3);  // mm0, add1 (w1 as stored), mm2
  CHECK((*fits)->groups()[0].name == "mm0");
  CHECK((*fits)->groups()[1].name == "add1");
  CHECK((*fits)->groups()[1].weights.size() == 1);
  CHECK((*fits)->groups()[2].name == "mm2");
  // Under a policy that keeps only quant_int8, mm0 is one 6400-byte value,
  // built from w0's transposed copy (24576), itself built from w0 (24576).
  o.policy = DerivationPolicy::only({Derivation::quant_int8});
  o.budget_bytes = kQuantW0 + 2 * kTransposeW0 - 1;
  auto short_by_one = Residency::create(conformance::gpu(), f.model, o);
  REQUIRE_FALSE(short_by_one.ok());
  CHECK_MESSAGE(contains(short_by_one.status().to_string(), "group 'mm0' (1 members pinned together)"),
                short_by_one.status().to_string());
  o.budget_bytes = kQuantW0 + 2 * kTransposeW0;
  auto lean = Residency::create(conformance::gpu(), f.model, o);
  REQUIRE_MESSAGE(lean.ok(), lean.status().to_string());
  CHECK((*lean)->plan().size() == 2);
  auto set = (*lean)->pin((*lean)->groups()[0]);
  REQUIRE_MESSAGE(set.ok(), set.status().to_string());
  CHECK(set->bytes() == kQuantW0);
  set->reset();
  CHECK((*lean)->release(conformance::gpu()).status.ok());
}
