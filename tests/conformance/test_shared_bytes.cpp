// Weights that share bytes (issue 10): tied tensors viewed with other
// shapes, and one MatMulNBits B under two scales. The memo keys every value
// by everything its launch reads, so each gets its own correct result,
// checked against the scalar reference; same bytes with the same parameters
// stay one entry.
#include "conformance/conformance.hpp"

#include <reference/reference.hpp>

#include <ballast/derived_weights.hpp>
#include <ballast/model_resource.hpp>

using namespace conformance;
using ballast::DataType;
using ballast::Derivation;
using ballast::DerivationKey;
using ballast::DerivationLaunch;
using ballast::DerivedPair;
using ballast::DerivedPtr;
using ballast::DerivedWeights;
using ballast::DevicePtr;
using ballast::Result;
namespace derive = ballast::derive;
namespace reference = ballast::reference;

namespace {

// Allocates the outputs of `l`, launches and waits; what the memo builds.
// On failure it frees what it allocated, as the memo's build contract
// asks: otherwise a backend whose launch fails would also be reported as
// leaking the suite's own allocations.
Result<DerivedPair> run(DerivationLaunch l) {
  auto& g = gpu();
  auto sizes = ballast::derivation_sizes(l);
  if (!sizes.ok()) return sizes.error();
  auto dst = g.allocate(sizes->dst_bytes);
  if (!dst.ok()) return dst.error();
  l.dst = *dst;
  if (sizes->dst2_bytes != 0) {
    auto second = g.allocate(sizes->dst2_bytes);
    if (!second.ok()) {
      static_cast<void>(g.free(l.dst));
      return second.error();
    }
    l.dst2 = *second;
  }
  ballast::Status s = g.launch(l);
  if (s.ok()) s = g.synchronize();
  if (!s.ok()) {
    static_cast<void>(g.free(l.dst));
    if (l.dst2 != 0) static_cast<void>(g.free(l.dst2));
    return s.error();
  }
  return DerivedPair{{l.dst, sizes->dst_bytes}, {l.dst2, sizes->dst2_bytes}};
}

// The memoized value of `l`'s derivation, checked against the reference on
// the same host bytes.
DevicePtr derive_and_check(DerivedWeights& memo, const DerivationLaunch& l, const reference::Inputs& in) {
  const DerivationKey key = DerivationKey::of(l);
  DevicePtr first = 0, second = 0;
  if (ballast::derivation_yields_pair(l.kind)) {
    auto v = memo.get_or_build_pair(l.kind, key, [&] { return run(l); });
    REQUIRE_MESSAGE(v.ok(), describe(v.status()));
    first = v->first;
    second = v->second;
  } else {
    auto v = memo.get_or_build_ptr(l.kind, key, [&]() -> Result<DerivedPtr> {
      auto p = run(l);
      if (!p.ok()) return p.error();
      return p->first;
    });
    REQUIRE_MESSAGE(v.ok(), describe(v.status()));
    first = *v;
  }
  auto sizes = ballast::derivation_sizes(l);
  REQUIRE(sizes.ok());
  auto want = reference::derive(l, in);
  REQUIRE_MESSAGE(want.ok(), describe(want.status()));
  const auto got = download(first, sizes->dst_bytes);
  const auto got2 = second != 0 ? download(second, sizes->dst2_bytes) : std::vector<std::byte>{};
  reference::Tolerance tol;
  tol.flushes_f16_subnormals = gpu().capabilities().flushes_f16_subnormals;
  tol.int8_codes_within_one = gpu().capabilities().int8_codes_within_one;
  const auto cmp = reference::compare(l, *want, got, got2, tol);
  CHECK_MESSAGE(cmp.ok, ballast::derivation_name(l.kind) << ": " << cmp.message);
  return first;
}

}  // namespace

TEST_CASE("shared bytes: tied weights with other shapes each get their own derivation") {
  LeakCheck leaks;
  const auto bytes = random_bytes(16 * 48 * 4, 11);
  std::vector<float> values(16 * 48);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(static_cast<int>(i % 97) - 48) * 0.125f;
  DeviceBuffer src = upload(bytes_of(values));
  const reference::Inputs in{bytes_of(values), {}, {}};
  DerivedWeights memo("shared bytes");
  ballast::TeardownHost<ballast::GpuBackend> host;
  host.add(memo);

  for (Derivation kind : {Derivation::transpose, Derivation::quant_int8}) {
    CAPTURE(ballast::derivation_name(kind));
    DerivationLaunch a;
    a.kind = kind;
    a.src_type = DataType::float32;
    a.src = src.ptr();
    a.rows = 16;
    a.cols = 48;
    DerivationLaunch b = a;  // the same bytes read as [48, 16]
    b.rows = 48;
    b.cols = 16;
    const DevicePtr va = derive_and_check(memo, a, in);
    const DevicePtr vb = derive_and_check(memo, b, in);
    CHECK(va != vb);
    // The same bytes with the same parameters: one entry, shared.
    CHECK(derive_and_check(memo, a, in) == va);
  }
  CHECK(memo.len() == 4);
  const auto report = host.teardown(gpu());
  CHECK_MESSAGE(report.ok(), report.to_string());
}

TEST_CASE("shared bytes: one MatMulNBits B under two scales gets two results") {
  LeakCheck leaks;
  const std::uint64_t n = 40, k = 96, block = 32, kb = k / block;
  const auto b_bytes = random_bytes(n * kb * block / 2, 5);
  std::vector<float> scales_a(n * kb), scales_b(n * kb);
  for (std::size_t i = 0; i < scales_a.size(); ++i) {
    scales_a[i] = 0.01f * static_cast<float>(1 + i % 7);
    scales_b[i] = 0.25f * static_cast<float>(1 + i % 5);
  }
  const auto zp = random_bytes(n * ((kb + 1) / 2), 9);
  DeviceBuffer b = upload(b_bytes), sa = upload(bytes_of(scales_a)), sb = upload(bytes_of(scales_b)), z = upload(zp);
  DerivedWeights memo("shared B");
  ballast::TeardownHost<ballast::GpuBackend> host;
  host.add(memo);

  for (Derivation kind : {Derivation::dequant_int4, Derivation::repack_int4}) {
    CAPTURE(ballast::derivation_name(kind));
    DerivationLaunch first;
    first.kind = kind;
    first.src_type = DataType::float32;
    first.rows = n;
    first.cols = k;
    first.block_size = static_cast<std::uint32_t>(block);
    first.zero_points = ballast::ZeroPoints::packed_u4;
    first.src = b.ptr();
    first.scales = sa.ptr();
    first.zero_point = z.ptr();
    DerivationLaunch second = first;  // same B, other scales, no zero points
    second.scales = sb.ptr();
    second.zero_points = ballast::ZeroPoints::absent;
    second.zero_point = 0;
    const DevicePtr v1 = derive_and_check(memo, first, {b_bytes, bytes_of(scales_a), zp});
    const DevicePtr v2 = derive_and_check(memo, second, {b_bytes, bytes_of(scales_b), {}});
    CHECK(v1 != v2);
  }
  CHECK(memo.len() == 4);
  const auto report = host.teardown(gpu());
  CHECK_MESSAGE(report.ok(), report.to_string());
}
