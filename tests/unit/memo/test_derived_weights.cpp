#include <ballast/derived_weights.hpp>
#include <doctest/doctest.h>

#include "unit/memo/recording_backend.hpp"

#include <stdexcept>

using namespace ballast;
using ballast::test::RecordingBackend;
using ballast::test::key_of;

namespace {

DevicePtr alloc(RecordingBackend& gpu, std::uint64_t bytes) { return gpu.allocate(bytes).value(); }

DerivedPtr derived(RecordingBackend& gpu, std::uint64_t bytes) { return {alloc(gpu, bytes), bytes}; }

DerivedPair derived_pair(RecordingBackend& gpu, std::uint64_t a, std::uint64_t b) {
  return {derived(gpu, a), derived(gpu, b)};
}

}  // namespace

// The typed forms are checked again, by really compiling bad calls, in the
// unit_memo_typed_kinds test; this keeps the rule visible next to the others.
template <class K>
concept gets_ptr = requires(DerivedWeights& m, K k) { m.get_ptr(k, key_of(1)); };
template <class K>
concept gets_pair = requires(DerivedWeights& m, K k) { m.get_pair(k, key_of(1)); };
template <class K>
concept inserts_ptr = requires(DerivedWeights& m, K k) { m.insert_ptr(k, key_of(1), DerivedPtr{}); };
template <class K>
concept inserts_pair = requires(DerivedWeights& m, K k) { m.insert_pair(k, key_of(1), DerivedPair{}); };
static_assert(gets_ptr<decltype(derive::transpose)> && !gets_ptr<decltype(derive::quant_int8)>);
static_assert(gets_pair<decltype(derive::repack_int4)> && !gets_pair<decltype(derive::to_f16)>);
static_assert(inserts_ptr<decltype(derive::dequant_int4)> && !inserts_ptr<decltype(derive::repack_int4)>);
static_assert(inserts_pair<decltype(derive::quant_int8)> && !inserts_pair<decltype(derive::transpose)>);
static_assert(gets_pair<decltype(derive::repack_gguf_int4)> && gets_pair<decltype(derive::quant_int8_given_max)>);
static_assert(gets_ptr<decltype(derive::slice)> && gets_ptr<decltype(derive::dequant_gguf_f32)> &&
              !gets_pair<decltype(derive::slice)>);
// Run-time kinds compile for both forms (and are checked when called).
static_assert(gets_ptr<Derivation> && gets_pair<Derivation>);

TEST_CASE("the compile-time tags agree with derivation_yields_pair") {
  CHECK(derive::transpose.pair == derivation_yields_pair(Derivation::transpose));
  CHECK(derive::to_f16.pair == derivation_yields_pair(Derivation::to_f16));
  CHECK(derive::dequant_int4.pair == derivation_yields_pair(Derivation::dequant_int4));
  CHECK(derive::repack_int4.pair == derivation_yields_pair(Derivation::repack_int4));
  CHECK(derive::quant_int8.pair == derivation_yields_pair(Derivation::quant_int8));
  CHECK(derive::repack_gguf_int4.pair == derivation_yields_pair(Derivation::repack_gguf_int4));
  CHECK(derive::quant_int8_given_max.pair == derivation_yields_pair(Derivation::quant_int8_given_max));
  CHECK(derive::slice.pair == derivation_yields_pair(Derivation::slice));
  for (int k = 0; k < kDerivationCount; ++k)
    CHECK(derive::yields_pair(static_cast<Derivation>(k)) == derivation_yields_pair(static_cast<Derivation>(k)));
}

TEST_CASE("a fresh memo is empty and misses") {
  DerivedWeights memo;
  CHECK(memo.len() == 0);
  CHECK(memo.is_empty());
  CHECK(memo.bytes() == 0);
  CHECK_FALSE(memo.get_ptr(derive::transpose, key_of(0x1000)).has_value());
  CHECK_FALSE(memo.get_pair(derive::quant_int8, key_of(0x1000)).has_value());
  CHECK(memo.stats().misses == 2);
  CHECK(memo.stats().hits == 0);
  CHECK(memo.label() == "derived weights");
  CHECK(DerivedWeights("layer cache").label() == "layer cache");
}

TEST_CASE("insert then get, per derivation: the same key under two kinds is two entries") {
  RecordingBackend gpu;
  DerivedWeights memo;
  const DevicePtr key = alloc(gpu, 64);
  const DerivedPtr t = derived(gpu, 64);
  const DerivedPtr h = derived(gpu, 32);
  const DerivedPair q = derived_pair(gpu, 16, 4);

  auto ti = memo.insert_ptr(derive::transpose, key_of(key), t);
  REQUIRE(ti.ok());
  CHECK(ti->inserted());
  CHECK(ti->memoized == t.first);
  REQUIRE(memo.insert_ptr(derive::to_f16, key_of(key), h).ok());
  auto qi = memo.insert_pair(derive::quant_int8, key_of(key), q);
  REQUIRE(qi.ok());
  CHECK(qi->memoized == DevicePair{q.first.first, q.second.first});

  CHECK(memo.len() == 3);
  CHECK_FALSE(memo.is_empty());
  CHECK(memo.bytes() == 64 + 32 + 16 + 4);
  CHECK(memo.get_ptr(derive::transpose, key_of(key)) == t.first);
  CHECK(memo.get_ptr(derive::to_f16, key_of(key)) == h.first);
  CHECK_FALSE(memo.get_ptr(derive::dequant_int4, key_of(key)).has_value());
  CHECK(memo.get_pair(derive::quant_int8, key_of(key)) == DevicePair{q.first.first, q.second.first});
  CHECK_FALSE(memo.get_pair(derive::repack_int4, key_of(key)).has_value());
  CHECK_FALSE(memo.get_ptr(derive::transpose, key_of(key + 1)).has_value());
  CHECK(memo.stats().hits == 3);
  CHECK(memo.stats().misses == 3);
  static_cast<void>(memo.release(gpu));
}

TEST_CASE("insert on an occupied entry keeps the first writer and hands the rejected value back") {
  RecordingBackend gpu;
  DerivedWeights memo;
  const DevicePtr key = alloc(gpu, 64);
  const DerivedPtr first = derived(gpu, 64);
  const DerivedPtr second = derived(gpu, 64);
  REQUIRE(memo.insert_ptr(derive::transpose, key_of(key), first).ok());

  auto again = memo.insert_ptr(derive::transpose, key_of(key), second);
  REQUIRE(again.ok());
  CHECK_FALSE(again->inserted());
  CHECK(again->memoized == first.first);
  REQUIRE(again->rejected.has_value());
  CHECK(*again->rejected == second);
  CHECK(memo.get_ptr(derive::transpose, key_of(key)) == first.first);
  CHECK(memo.len() == 1);
  CHECK(memo.bytes() == 64);
  CHECK(memo.stats().rejected_inserts == 1);

  // Pairs too: both halves of the loser come back.
  const DerivedPair p1 = derived_pair(gpu, 8, 8);
  const DerivedPair p2 = derived_pair(gpu, 8, 8);
  REQUIRE(memo.insert_pair(derive::repack_int4, key_of(key), p1).ok());
  auto lost = memo.insert_pair(derive::repack_int4, key_of(key), p2);
  REQUIRE(lost.ok());
  CHECK(lost->memoized == p1.value());
  REQUIRE(lost->rejected.has_value());
  CHECK(*lost->rejected == p2);

  // The memo frees only what it kept; the rejected values are the caller's.
  Released r = memo.release(gpu);
  CHECK(r.status.ok());
  CHECK(gpu.times_freed(second.first) == 0);
  CHECK(gpu.times_freed(p2.first.first) == 0);
  CHECK(gpu.times_freed(p2.second.first) == 0);
  CHECK(gpu.free(second.first).ok());
  CHECK(gpu.free(p2.first.first).ok());
  CHECK(gpu.free(p2.second.first).ok());
}

TEST_CASE("run-time kinds: the wrong form is a wrong_kind error, an unknown kind is invalid_argument") {
  DerivedWeights memo;
  auto p = memo.get_ptr(Derivation::quant_int8, key_of(0x1000));
  CHECK(p.code() == ErrorCode::wrong_kind);
  CHECK(p.error().message.find("quant_int8") != std::string::npos);
  CHECK(memo.get_pair(Derivation::transpose, key_of(0x1000)).code() == ErrorCode::wrong_kind);
  CHECK(memo.insert_ptr(Derivation::repack_int4, key_of(0x1000), DerivedPtr{0x2000, 4}).code() == ErrorCode::wrong_kind);
  CHECK(memo.insert_pair(Derivation::dequant_int4, key_of(0x1000), DerivedPair{}).code() == ErrorCode::wrong_kind);
  int builds = 0;
  auto b = memo.get_or_build_ptr(Derivation::quant_int8, key_of(0x1000), [&]() -> Result<DerivedPtr> {
    ++builds;
    return DerivedPtr{0x2000, 4};
  });
  CHECK(b.code() == ErrorCode::wrong_kind);
  auto bp = memo.get_or_build_pair(Derivation::to_f16, key_of(0x1000), [&]() -> Result<DerivedPair> {
    ++builds;
    return DerivedPair{};
  });
  CHECK(bp.code() == ErrorCode::wrong_kind);
  CHECK(builds == 0);
  CHECK(memo.is_empty());
  CHECK(memo.get_ptr(static_cast<Derivation>(kDerivationCount), key_of(1)).code() == ErrorCode::invalid_argument);
  CHECK(memo.get_pair(static_cast<Derivation>(200), key_of(1)).code() == ErrorCode::invalid_argument);

  // The right run-time form works and sees what the typed form stored.
  REQUIRE(memo.insert_ptr(Derivation::dequant_int4, key_of(0x1000), DerivedPtr{0x3000, 8}).ok());
  auto hit = memo.get_ptr(Derivation::dequant_int4, key_of(0x1000));
  REQUIRE(hit.ok());
  CHECK(*hit == std::optional<DevicePtr>(0x3000));
  CHECK(memo.get_ptr(derive::dequant_int4, key_of(0x1000)) == 0x3000);
  auto miss = memo.get_pair(Derivation::repack_int4, key_of(0x1000));
  REQUIRE(miss.ok());
  CHECK_FALSE(miss->has_value());
}

TEST_CASE("get_or_build builds once, then hits") {
  RecordingBackend gpu;
  DerivedWeights memo;
  const DevicePtr key = alloc(gpu, 128);
  int builds = 0;
  auto build = [&]() -> Result<DerivedPtr> {
    ++builds;
    return derived(gpu, 256);
  };
  auto a = memo.get_or_build_ptr(derive::to_f16, key_of(key), build);
  auto b = memo.get_or_build_ptr(derive::to_f16, key_of(key), build);
  auto c = memo.get_or_build_ptr(Derivation::to_f16, key_of(key), build);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(*a == *b);
  CHECK(*a == *c);
  CHECK(builds == 1);
  CHECK(memo.len() == 1);
  CHECK(memo.bytes() == 256);
  const DerivedWeightsStats s = memo.stats();
  CHECK(s.builds == 1);
  CHECK(s.hits == 2);
  CHECK(s.misses == 1);
  CHECK(s.waits == 0);

  int pair_builds = 0;
  auto pb = [&]() -> Result<DerivedPair> {
    ++pair_builds;
    return derived_pair(gpu, 100, 10);
  };
  auto p1 = memo.get_or_build_pair(derive::repack_int4, key_of(key), pb);
  auto p2 = memo.get_or_build_pair(Derivation::repack_int4, key_of(key), pb);
  REQUIRE(p1.ok());
  REQUIRE(p2.ok());
  CHECK(*p1 == *p2);
  CHECK(pair_builds == 1);
  CHECK(memo.get_pair(derive::repack_int4, key_of(key)) == *p1);
  CHECK(memo.len() == 2);
  static_cast<void>(memo.release(gpu));
}

TEST_CASE("release frees every value, both halves of pairs, each once, and never a key") {
  RecordingBackend gpu;
  DerivedWeights memo;
  std::vector<DevicePtr> keys;
  std::vector<DevicePtr> values;
  std::uint64_t expected_bytes = 0;
  for (int i = 0; i < 20; ++i) {
    const DevicePtr key = alloc(gpu, 1000);
    keys.push_back(key);
    auto one = memo.get_or_build_ptr(derive::transpose, key_of(key), [&]() -> Result<DerivedPtr> { return derived(gpu, 10); });
    REQUIRE(one.ok());
    values.push_back(*one);
    const DerivedPtr f16 = derived(gpu, 20);
    REQUIRE(memo.insert_ptr(derive::to_f16, key_of(key), f16).ok());
    values.push_back(f16.first);
    auto two = memo.get_or_build_pair(derive::quant_int8, key_of(key), [&]() -> Result<DerivedPair> {
      return derived_pair(gpu, 30, 40);
    });
    REQUIRE(two.ok());
    values.push_back(two->first);
    values.push_back(two->second);
    expected_bytes += 10 + 20 + 30 + 40;
  }
  CHECK(memo.len() == 60);
  CHECK(memo.bytes() == expected_bytes);

  Released r = memo.release(gpu);
  CHECK(r.status.ok());
  CHECK(r.allocations_freed == values.size());
  CHECK(r.bytes_freed == expected_bytes);
  CHECK(r.failed_frees == 0);
  CHECK(memo.is_empty());
  CHECK(memo.bytes() == 0);
  for (DevicePtr v : values) CHECK(gpu.times_freed(v) == 1);
  for (DevicePtr k : keys) {
    CHECK(gpu.times_freed(k) == 0);
    CHECK(gpu.is_live(k));
  }
  CHECK(gpu.freed().size() == values.size());
  CHECK(gpu.bad_frees() == 0);
  CHECK(gpu.counters().live_allocations == keys.size());

  // Idempotent: a second release frees nothing and succeeds.
  Released again = memo.release(gpu);
  CHECK(again.status.ok());
  CHECK(again.allocations_freed == 0);
  CHECK(again.bytes_freed == 0);
  CHECK(gpu.freed().size() == values.size());
  CHECK(gpu.bad_frees() == 0);

  // And the memo is usable again afterwards.
  auto rebuilt = memo.get_or_build_ptr(derive::transpose, key_of(keys[0]), [&]() -> Result<DerivedPtr> { return derived(gpu, 10); });
  REQUIRE(rebuilt.ok());
  CHECK(memo.len() == 1);
  CHECK(memo.release(gpu).allocations_freed == 1);
}

TEST_CASE("release keeps going past a refused free, reports the first, and still empties the memo") {
  RecordingBackend gpu;
  DerivedWeights memo("model weights");
  const DerivedPtr a = derived(gpu, 100);
  const DerivedPair p = derived_pair(gpu, 200, 300);
  const DerivedPtr c = derived(gpu, 400);
  REQUIRE(memo.insert_ptr(derive::transpose, key_of(0x10), a).ok());
  REQUIRE(memo.insert_pair(derive::repack_int4, key_of(0x20), p).ok());
  REQUIRE(memo.insert_ptr(derive::dequant_int4, key_of(0x30), c).ok());
  gpu.refuse(p.first.first);
  gpu.refuse(c.first);

  Released r = memo.release(gpu);
  CHECK_FALSE(r.status.ok());
  CHECK(r.status.code() == ErrorCode::device_error);
  CHECK(r.failed_frees == 2);
  CHECK(r.allocations_freed == 2);
  CHECK(r.bytes_freed == 100 + 300);
  const std::string text = r.status.to_string();
  CHECK(text.find("releasing model weights") != std::string::npos);
  CHECK(text.find("1 more refused free") != std::string::npos);
  // Every value was tried exactly once, the second half of the refused pair too.
  CHECK(gpu.times_freed(a.first) == 1);
  CHECK(gpu.times_freed(p.first.first) == 1);
  CHECK(gpu.times_freed(p.second.first) == 1);
  CHECK(gpu.times_freed(c.first) == 1);
  CHECK(memo.is_empty());

  Released again = memo.release(gpu);
  CHECK(again.status.ok());
  CHECK(again.allocations_freed == 0);
  CHECK(gpu.freed().size() == 4);
}

TEST_CASE("one refused free is reported alone, with no count of more") {
  RecordingBackend gpu;
  DerivedWeights memo("model weights");
  const DerivedPtr a = derived(gpu, 100);
  const DerivedPtr b = derived(gpu, 200);
  REQUIRE(memo.insert_ptr(derive::transpose, key_of(0x10), a).ok());
  REQUIRE(memo.insert_ptr(derive::to_f16, key_of(0x20), b).ok());
  gpu.refuse(b.first);
  Released r = memo.release(gpu);
  CHECK(r.failed_frees == 1);
  CHECK(r.allocations_freed == 1);
  const std::string text = r.status.to_string();
  CHECK(text.find("releasing model weights") != std::string::npos);
  CHECK_MESSAGE(text.find("more refused free") == std::string::npos, text);
}

TEST_CASE("a failed build is not memoized: no entry, no leak, and the next caller builds again") {
  RecordingBackend gpu;
  DerivedWeights memo;
  const DevicePtr key = alloc(gpu, 64);
  int attempts = 0;
  auto flaky = [&]() -> Result<DerivedPtr> {
    ++attempts;
    const DevicePtr dst = alloc(gpu, 64);
    if (attempts == 1) {
      static_cast<void>(gpu.free(dst));  // the build contract: a failing build frees what it allocated
      return make_error(ErrorCode::device_error, "kernel launch failed");
    }
    return DerivedPtr{dst, 64};
  };

  auto first = memo.get_or_build_ptr(derive::transpose, key_of(key), flaky);
  REQUIRE_FALSE(first.ok());
  CHECK(first.code() == ErrorCode::device_error);
  CHECK(first.error().to_string().find("building transpose of source") != std::string::npos);
  CHECK(memo.is_empty());
  CHECK_FALSE(memo.get_ptr(derive::transpose, key_of(key)).has_value());
  CHECK(gpu.counters().live_allocations == 1);  // only the key

  auto second = memo.get_or_build_ptr(derive::transpose, key_of(key), flaky);
  REQUIRE(second.ok());
  CHECK(attempts == 2);
  CHECK(memo.len() == 1);
  CHECK(memo.stats().builds == 2);
  CHECK(memo.stats().failed_builds == 1);

  CHECK(memo.release(gpu).status.ok());
  CHECK(gpu.counters().live_allocations == 1);
  CHECK(gpu.bad_frees() == 0);
}

TEST_CASE("a build that throws becomes an internal error, leaves no entry, and the next call retries") {
  DerivedWeights memo;
  auto thrower = []() -> Result<DerivedPtr> { throw std::runtime_error("kernel compiler crashed"); };
  auto r = memo.get_or_build_ptr(derive::to_f16, key_of(0x40), thrower);
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == ErrorCode::internal);
  CHECK(r.error().message.find("kernel compiler crashed") != std::string::npos);
  auto odd = memo.get_or_build_pair(derive::quant_int8, key_of(0x40), []() -> Result<DerivedPair> { throw 42; });
  CHECK(odd.code() == ErrorCode::internal);
  CHECK(memo.is_empty());
  auto ok = memo.get_or_build_ptr(derive::to_f16, key_of(0x40), []() -> Result<DerivedPtr> { return DerivedPtr{0x99, 1}; });
  REQUIRE(ok.ok());
  CHECK(*ok == 0x99);
}

TEST_CASE("a build that asks the memo for its own entry gets an error instead of a deadlock") {
  DerivedWeights memo;
  Result<DevicePtr> inner = make_error(ErrorCode::internal, "not run");
  Result<Insertion<DerivedPtr>> inner_insert = make_error(ErrorCode::internal, "not run");
  auto outer = memo.get_or_build_ptr(derive::transpose, key_of(0x50), [&]() -> Result<DerivedPtr> {
    inner = memo.get_or_build_ptr(derive::transpose, key_of(0x50), []() -> Result<DerivedPtr> { return DerivedPtr{1, 1}; });
    inner_insert = memo.insert_ptr(derive::transpose, key_of(0x50), DerivedPtr{2, 1});
    // A different key, or the same key under another kind, is fine from inside a build.
    auto other = memo.get_or_build_ptr(derive::to_f16, key_of(0x50), []() -> Result<DerivedPtr> { return DerivedPtr{3, 1}; });
    if (!other.ok()) return other.error();
    CHECK(memo.get_ptr(derive::transpose, key_of(0x50)) == std::nullopt);  // in flight reads as a miss
    return DerivedPtr{4, 1};
  });
  REQUIRE(outer.ok());
  CHECK(*outer == 4);
  CHECK(inner.code() == ErrorCode::invalid_argument);
  CHECK(inner_insert.code() == ErrorCode::invalid_argument);
  CHECK(memo.get_ptr(derive::to_f16, key_of(0x50)) == 3);
  CHECK(memo.len() == 2);
}

TEST_CASE("the memo accepts const and move-only build callables") {
  DerivedWeights memo;
  const auto const_build = []() -> Result<DerivedPtr> { return DerivedPtr{0x700, 7}; };
  CHECK(memo.get_or_build_ptr(derive::transpose, key_of(1), const_build).value() == 0x700);
  auto owned = std::make_unique<int>(5);
  auto r = memo.get_or_build_ptr(derive::transpose, key_of(2), [o = std::move(owned)]() -> Result<DerivedPtr> {
    return DerivedPtr{static_cast<DevicePtr>(*o), 1};
  });
  CHECK(r.value() == 5);
  // A build returning the value directly converts to Result.
  CHECK(memo.get_or_build_ptr(derive::dequant_int4, key_of(3), [] { return DerivedPtr{0x800, 8}; }).value() == 0x800);
}

// The memo's keys are device pointers of sources, so a memo is tied to the
// sources' epoch (DeviceWeights::epoch()). These are the memo's own rules,
// checked here without a DeviceWeights (unit_derive_api checks them end to end).
TEST_CASE(
    "bind_sources: any epoch while empty or never tied, the same one again, another refused while values remain") {
  RecordingBackend gpu;
  const DevicePtr key = alloc(gpu, 64);
  {  // values inserted before any tie: the first tie takes them
    DerivedWeights memo;
    REQUIRE(memo.insert_ptr(derive::transpose, key_of(key), derived(gpu, 64)).ok());
    CHECK(memo.bind_sources(7).ok());
    CHECK(memo.bind_sources(7).ok());
    static_cast<void>(memo.release(gpu));
  }
  DerivedWeights memo("bound memo");
  CHECK(memo.bind_sources(5).ok());  // empty: any epoch
  CHECK(memo.bind_sources(6).ok());  // still empty: tied to 6 now
  REQUIRE(memo.insert_ptr(derive::transpose, key_of(key), derived(gpu, 64)).ok());
  CHECK(memo.bind_sources(6).ok());                // the same sources: always
  for (int attempt = 0; attempt < 2; ++attempt) {  // a refusal ties nothing: refused again
    Status s = memo.bind_sources(5);
    REQUIRE(s.code() == ErrorCode::invalid_argument);
    const std::string text = s.error().to_string();
    CHECK_MESSAGE(text.find("memo 'bound memo' holds 1 values") != std::string::npos, text);
    CHECK_MESSAGE(text.find("(epoch 6, now 5)") != std::string::npos, text);
  }
  CHECK(memo.bind_sources(6).ok());  // and the memo's own epoch still is
  CHECK(memo.get_ptr(derive::transpose, key_of(key)).has_value());
  // Released, the memo is untied and empty: the next sources take it.
  REQUIRE(memo.release(gpu).status.ok());
  CHECK(memo.bind_sources(9).ok());
  REQUIRE(memo.insert_ptr(derive::transpose, key_of(key), derived(gpu, 64)).ok());
  CHECK(memo.bind_sources(6).code() == ErrorCode::invalid_argument);
  CHECK(memo.bind_sources(9).ok());
  static_cast<void>(memo.release(gpu));
}

// A memo tied to a backend (bind_sources(epoch, backend), as derive_weight
// ties it) serves that backend only: deriving on another is refused while
// it holds values, and a release on another is refused whole, every value
// kept and still live, so the release on its own backend frees them all.
TEST_CASE(
    "bind_sources with a backend: another backend is refused, for deriving and for release, while values remain") {
  RecordingBackend own, other;
  const DevicePtr key = alloc(own, 64);
  DerivedWeights memo("tied memo");
  CHECK(memo.bind_sources(3, other).ok());  // empty: any backend, and the last one told is the memo's
  CHECK(memo.bind_sources(3, own).ok());
  const DerivedPtr value = derived(own, 64);
  REQUIRE(memo.insert_ptr(derive::transpose, key_of(key), value).ok());
  CHECK(memo.bind_sources(3, own).ok());
  CHECK(memo.bind_sources(3).ok());  // told no backend: the epoch's rule alone
  Status refused = memo.bind_sources(3, other);
  REQUIRE(refused.code() == ErrorCode::invalid_argument);
  CHECK_MESSAGE(
      refused.error().to_string().find("memo 'tied memo' holds 1 values built on recording:0") != std::string::npos,
      refused.error().to_string());

  const Released wrong = memo.release(other);
  REQUIRE(wrong.status.code() == ErrorCode::invalid_argument);
  const std::string text = wrong.status.error().to_string();
  CHECK_MESSAGE(text.find("tied memo: release on recording:0") != std::string::npos, text);
  CHECK_MESSAGE(text.find("not on the backend its values were built on") != std::string::npos, text);
  CHECK(wrong.allocations_freed == 0);
  CHECK(wrong.failed_frees == 0);
  CHECK(other.freed().empty());  // nothing reached the other backend
  CHECK(memo.len() == 1);        // nothing forgotten
  CHECK(own.is_live(value.first));
  CHECK(memo.get_ptr(derive::transpose, key_of(key)).has_value());

  const Released right = memo.release(own);
  CHECK(right.status.ok());
  CHECK(right.allocations_freed == 1);
  CHECK_FALSE(own.is_live(value.first));
  // Released, the memo is untied: another backend may take it, and a
  // release on any backend of an empty memo frees nothing and succeeds.
  CHECK(memo.release(other).status.ok());
  CHECK(memo.bind_sources(4, other).ok());
  static_cast<void>(own.free(key));
}

// The key's text (in a failed free's error) names each operand that is
// set, and no operand that is not.
TEST_CASE("DerivationKey::to_string names the operands that are set, and only those") {
  DerivationKey k;
  k.source = 0x1000;
  k.rows = 4;
  k.cols = 64;
  k.src_type = DataType::float16;
  CHECK(k.to_string() == "source 0x1000 [4 x 64] float16");
  k.block_size = 32;
  k.scales = 0x2000;
  CHECK(k.to_string() == "source 0x1000 [4 x 64] float16 block 32 scales 0x2000");
  k.zero_point = 0x3000;
  CHECK(k.to_string() == "source 0x1000 [4 x 64] float16 block 32 scales 0x2000 zero points 0x3000");
  k.scales = 0;
  CHECK(k.to_string() == "source 0x1000 [4 x 64] float16 block 32 zero points 0x3000");
  k = DerivationKey{};
  k.source = 0x1000;
  k.rows = 4;
  k.cols = 16;
  k.src_type = DataType::float32;
  k.src_cols = 64;
  k.col_offset = 32;
  CHECK(k.to_string() == "source 0x1000 [4 x 16] float columns 32+ of 64");
}
