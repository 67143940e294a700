// Bad launches are errors, not crashes, and leave the backend usable.
#include "conformance/conformance.hpp"
#include "conformance/derivation_runner.hpp"

#include <functional>
#include <string>
#include <vector>

using namespace conformance;
using ballast::DataType;
using ballast::Derivation;
using ballast::DerivationLaunch;
using ballast::ZeroPoints;

namespace {

// launch + synchronize: a backend may refuse at launch or report at sync.
bool refused(const DerivationLaunch& l, std::string& why) {
  const auto launched = gpu().launch(l);
  const auto synced = gpu().synchronize();
  why = launched.ok() ? synced.to_string() : launched.to_string();
  return !launched.ok() || !synced.ok();
}

}  // namespace

TEST_CASE("launch validation: bad shapes and bad pointers are errors and the backend stays usable") {
  LeakCheck leaks;
  DeviceBuffer src = upload(random_bytes(1 << 16, 7));
  DeviceBuffer scales = upload(random_bytes(1 << 12, 8));
  DeviceBuffer dst = allocate(1 << 16);
  DeviceBuffer dst2 = allocate(1 << 12);
  DeviceBuffer small = allocate(64);
  DevicePtr freed = 0;
  {
    DeviceBuffer gone = allocate(1 << 16);
    freed = gone.ptr();
  }

  DerivationLaunch transpose;
  transpose.kind = Derivation::transpose;
  transpose.src_type = DataType::float32;
  transpose.rows = 32;
  transpose.cols = 32;  // 4096 bytes
  transpose.src = src.ptr();
  transpose.dst = dst.ptr();

  DerivationLaunch dequant;
  dequant.kind = Derivation::dequant_int4;
  dequant.src_type = DataType::float32;
  dequant.rows = 4;
  dequant.cols = 64;
  dequant.block_size = 32;
  dequant.src = src.ptr();
  dequant.scales = scales.ptr();
  dequant.dst = dst.ptr();

  DerivationLaunch quant;
  quant.kind = Derivation::quant_int8;
  quant.src_type = DataType::float32;
  quant.rows = 8;
  quant.cols = 64;
  quant.src = src.ptr();
  quant.dst = dst.ptr();
  quant.dst2 = dst2.ptr();

  struct Bad {
    const char* what;
    DerivationLaunch launch;
  };
  std::vector<Bad> bad;
  auto with = [](DerivationLaunch l, const std::function<void(DerivationLaunch&)>& change) {
    change(l);
    return l;
  };
  bad.push_back({"block_size 24", with(dequant, [](auto& l) { l.block_size = 24; })});
  bad.push_back({"block_size 8", with(dequant, [](auto& l) { l.block_size = 8; })});
  bad.push_back({"block_size 0", with(dequant, [](auto& l) { l.block_size = 0; })});
  bad.push_back({"int4 scales of type int8", with(dequant, [](auto& l) { l.src_type = DataType::int8; })});
  bad.push_back({"to_f16 from int8", with(transpose, [](auto& l) {
                   l.kind = Derivation::to_f16;
                   l.src_type = DataType::int8;
                 })});
  bad.push_back({"transpose of strings", with(transpose, [](auto& l) { l.src_type = DataType::string; })});
  bad.push_back({"derivation kind past the last", with(transpose, [](auto& l) { l.kind = static_cast<Derivation>(ballast::kDerivationCount); })});
  bad.push_back({"rows x cols overflows", with(transpose, [](auto& l) {
                   l.rows = 1ull << 33;
                   l.cols = 1ull << 33;
                 })});
  bad.push_back({"source larger than its allocation", with(transpose, [&](auto& l) { l.src = small.ptr(); })});
  bad.push_back({"destination larger than its allocation", with(transpose, [&](auto& l) { l.dst = small.ptr(); })});
  bad.push_back({"destination runs past the end from an interior pointer",
                 with(transpose, [&](auto& l) { l.dst = dst.ptr() + (1 << 16) - 8; })});
  bad.push_back({"null source", with(transpose, [](auto& l) { l.src = 0; })});
  bad.push_back({"null destination", with(transpose, [](auto& l) { l.dst = 0; })});
  bad.push_back({"unknown source pointer", with(transpose, [](auto& l) { l.src = 0xdead0000ull; })});
  bad.push_back({"freed source pointer", with(transpose, [&](auto& l) { l.src = freed; })});
  bad.push_back({"int4 without scales", with(dequant, [](auto& l) { l.scales = 0; })});
  bad.push_back({"packed zero points missing", with(dequant, [](auto& l) { l.zero_points = ZeroPoints::packed_u4; })});
  bad.push_back({"pair derivation without its second output", with(quant, [](auto& l) { l.dst2 = 0; })});
  bad.push_back({"second output too small", with(quant, [&](auto& l) { l.dst2 = small.ptr() + 60; })});

  for (const auto& b : bad) {
    INFO(b.what);
    std::string why;
    CHECK_MESSAGE(refused(b.launch, why), b.what << " was accepted");
  }

  // Still usable: a valid launch after all that succeeds and is correct.
  const std::string failure = run_derivation_case(transpose_case(DataType::float32, 31, 17, 9));
  CHECK_MESSAGE(failure.empty(), failure);
  CHECK(gpu().synchronize().ok());
}

TEST_CASE("launch validation: empty operands may be null; quant_int8 with K = 0 writes N zero scales") {
  // The CPU's vector kernel passed the empty, null codes operand to memset:
  // undefined behaviour, which UBSan reported under fuzz_launch_validation
  // (and would under the asan preset).
  LeakCheck leaks;
  DeviceBuffer scales = upload(random_bytes(64, 9));
  DerivationLaunch quant;
  quant.kind = Derivation::quant_int8;
  quant.src_type = DataType::float32;
  quant.rows = 16;
  quant.cols = 0;
  quant.dst2 = scales.ptr();  // src and dst: 0 bytes each, left null
  REQUIRE(gpu().launch(quant).ok());
  REQUIRE(gpu().synchronize().ok());
  CHECK(download(scales.ptr(), 64) == std::vector<std::byte>(64));
}

TEST_CASE("launch validation: repack_int4 pairs at a 2-byte-aligned dst2 (f16 elements) are written exactly") {
  // dst2 holds pairs of f16, so 2-byte alignment is allowed. The CPU
  // kernels stored each pair through a uint32_t pointer: a misaligned
  // store, which UBSan reported under fuzz_launch_validation.
  LeakCheck leaks;
  const auto c = int4_case(Derivation::repack_int4, DataType::float32, ZeroPoints::unpacked, 8, 200, 16, false, 5);
  const auto sizes = ballast::derivation_sizes(c.shape);
  REQUIRE(sizes.ok());
  DeviceBuffer src = upload(c.src);
  DeviceBuffer scales = upload(c.scales);
  DeviceBuffer zero_points = upload(c.zero_points);
  DeviceBuffer dst = allocate(sizes->dst_bytes);
  DeviceBuffer dst2 = allocate(sizes->dst2_bytes + 2);
  DerivationLaunch l = c.shape;
  l.src = src.ptr();
  l.scales = scales.ptr();
  l.zero_point = zero_points.ptr();
  l.dst = dst.ptr();
  l.dst2 = dst2.ptr() + 2;
  REQUIRE(gpu().launch(l).ok());
  REQUIRE(gpu().synchronize().ok());
  const auto expected = ballast::reference::derive(c.shape, c.inputs());
  REQUIRE(expected.ok());
  ballast::reference::Tolerance tol;
  tol.flushes_f16_subnormals = gpu().capabilities().flushes_f16_subnormals;
  const auto cmp = ballast::reference::compare(c.shape, *expected, download(dst.ptr(), sizes->dst_bytes),
                                               download(dst2.ptr(), sizes->dst2_bytes, 2), tol);
  CHECK_MESSAGE(cmp.ok, cmp.message);
}
