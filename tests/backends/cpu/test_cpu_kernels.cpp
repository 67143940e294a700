// Every CPU derivation against the scalar reference, for both kernel tables
// (simd on/off) and several thread counts, on the shapes and values where
// kernels go wrong: 1x1, odd K, K not a multiple of block_size, each
// zero-point form, f32/f16 scales, bf16 sources, NaN, inf, subnormals.
// (The full matrix is the conformance suite's; this pins the kernels here.)
#include "cpu_test_support.hpp"

#include <reference/reference.hpp>
#include <support/derivation_cases.hpp>
#include <support/output_guard.hpp>

#include "cpu/backend.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace ballast;
using cpu_test::bytes_of;
using cpu_test::download;
using cpu_test::upload;
using test_cases::awkward_f32;
using test_cases::random_bytes;
namespace ref = ballast::reference;

namespace {

const std::vector<std::map<std::string, std::string, std::less<>>> kConfigs = {
    {{"threads", "1"}, {"simd", "on"}},
    {{"threads", "2"}, {"simd", "off"}},
    {{"threads", "3"}, {"simd", "on"}},
    {{"threads", "2"}, {"simd", "avx2"}},  // the AVX2 forms where the CPU also has AVX-512's
};

using test_support::kGuardBytes;

DevicePtr guarded_output(GpuBackend& b, std::uint64_t bytes) {
  return upload(b, std::vector<std::byte>(bytes + kGuardBytes, test_support::kGuardFill));
}

// The guard bytes from byte `from` of the allocation `p` are untouched
// (support/output_guard.hpp).
void check_untouched_after(GpuBackend& b, DevicePtr p, std::uint64_t from, const char* what) {
  const std::string written = test_support::check_guard(b, what, p, from);
  CHECK_MESSAGE(written.empty(), written);
}

// Uploads the inputs, runs the launch on the backend and checks the outputs
// against the reference under the documented tolerances, and the bytes past
// them untouched.
void check_against_reference(GpuBackend& b, DerivationLaunch shape, const ref::Inputs& in) {
  auto sizes = derivation_sizes(shape);
  REQUIRE_MESSAGE(sizes.ok(), sizes.error().to_string());
  auto expected = ref::derive(shape, in);
  REQUIRE_MESSAGE(expected.ok(), expected.error().to_string());
  auto put = [&](std::span<const std::byte> s) {
    return s.empty() ? DevicePtr{0} : upload(b, std::vector<std::byte>(s.begin(), s.end()));
  };
  shape.src = put(in.src);
  shape.scales = put(in.scales);
  shape.zero_point = put(in.zero_points);
  shape.dst = guarded_output(b, sizes->dst_bytes);
  shape.dst2 = sizes->dst2_bytes ? guarded_output(b, sizes->dst2_bytes) : 0;
  const Status st = b.launch(shape);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  REQUIRE(b.synchronize().ok());
  check_untouched_after(b, shape.dst, sizes->dst_bytes, "dst");
  if (shape.dst2) check_untouched_after(b, shape.dst2, sizes->dst2_bytes, "dst2");
  const auto dst = download(b, shape.dst, sizes->dst_bytes);
  const auto dst2 = download(b, shape.dst2, sizes->dst2_bytes);
  const ref::Comparison c = ref::compare(shape, *expected, dst, dst2, {});
  CHECK_MESSAGE(c.ok, std::string(derivation_name(shape.kind)) << " " << shape.rows << "x" << shape.cols << ": "
                                                               << c.mismatches << " mismatches; first: " << c.message);
  if (shape.kind == Derivation::quant_int8)  // the CPU divides exactly: codes match, not just within 1
    CHECK(dst == expected->dst);
  for (DevicePtr p : {shape.src, shape.scales, shape.zero_point, shape.dst, shape.dst2})
    if (p) CHECK(b.free(p).ok());
}

}  // namespace

TEST_CASE("transpose of every element size") {
  std::mt19937 rng(1);
  for (const auto& config : kConfigs) {
    auto b = cpu_test::open_cpu(config);
    for (DataType t : {DataType::uint8, DataType::float16, DataType::float32, DataType::float64}) {
      // 90, 100 and 1114 rows leave, for some element size, a block of
      // one line's rows (not two) and then single rows at the bottom of a
      // super-tile (kernels_x86.cpp, transpose_blocked).
      for (auto [r, c] : {std::pair{1, 1}, {1, 7}, {7, 1}, {3, 5}, {37, 129}, {200, 333}, {64, 64}, {300, 270},
                          {90, 200}, {100, 150}, {1114, 161}}) {
        DerivationLaunch s;
        s.kind = Derivation::transpose;
        s.src_type = t;
        s.rows = r;
        s.cols = c;
        const auto src = random_bytes(rng, r * c * dtype_bits(t) / 8);
        check_against_reference(*b, s, {src});
      }
    }
  }
}

TEST_CASE("to_f16 from f32 and bf16") {
  std::mt19937 rng(2);
  for (const auto& config : kConfigs) {
    auto b = cpu_test::open_cpu(config);
    for (std::uint64_t n : {1u, 3u, 31u, 64u, 1000u, 100003u}) {
      std::vector<float> f(n);
      for (auto& x : f) x = awkward_f32(rng);
      DerivationLaunch s;
      s.kind = Derivation::to_f16;
      s.src_type = DataType::float32;
      s.rows = 1;
      s.cols = n;
      check_against_reference(*b, s, {bytes_of(f)});
    }
    // Every bf16 pattern, as a [256, 256] weight.
    std::vector<std::uint16_t> all(65536);
    for (std::uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<std::uint16_t>(i);
    DerivationLaunch s;
    s.kind = Derivation::to_f16;
    s.src_type = DataType::bfloat16;
    s.rows = 256;
    s.cols = 256;
    check_against_reference(*b, s, {bytes_of(all)});
    s.rows = 1;
    s.cols = 5;
    check_against_reference(*b, s, {bytes_of(std::vector<std::uint16_t>{0x3f80, 0x7fc1, 0x0001, 0x477f, 0xc77f})});
  }
}

namespace {

struct Int4Case {
  std::uint64_t n, k;
  std::uint32_t block_size;
};

const Int4Case kInt4Cases[] = {{1, 1, 16},
                               {1, 16, 16},
                               {3, 17, 16},
                               {2, 8, 16},
                               {5, 100, 32},
                               {4, 200, 64},
                               {7, 40, 16},
                               {2, 1000, 128},
                               {9, 4096, 32},
                               {3, 257, 256},
                               {6, 33, 16},
                               {33, 96, 16},
                               {2, 250, 16},
                               // eight whole blocks at a time, more than one line each (AVX-512's
                               // dequant_int4), then a whole block, or one cut short, after them
                               {3, 1024, 128},
                               {2, 1088, 64},
                               {2, 2088, 256}};

}  // namespace

TEST_CASE("dequant_int4 and repack_int4: every zero-point form and scale type") {
  std::mt19937 rng(3);
  for (const auto& config : kConfigs) {
    auto b = cpu_test::open_cpu(config);
    for (Derivation kind : {Derivation::dequant_int4, Derivation::repack_int4})
      for (DataType scale_type : {DataType::float32, DataType::float16})
        for (ZeroPoints zp : {ZeroPoints::absent, ZeroPoints::packed_u4, ZeroPoints::unpacked})
          for (const Int4Case& c : kInt4Cases) {
            DerivationLaunch s;
            s.kind = kind;
            s.src_type = scale_type;
            s.rows = c.n;
            s.cols = c.k;
            s.block_size = c.block_size;
            s.zero_points = zp;
            const test_cases::DerivationCase in = test_cases::int4_wide_range_case(rng, s);
            check_against_reference(*b, s, in.inputs());
          }
  }
}

TEST_CASE("quant_int8 from f32 and f16: zero rows, NaN, inf, subnormals") {
  std::mt19937 rng(4);
  for (const auto& config : kConfigs) {
    auto b = cpu_test::open_cpu(config);
    for (auto [n, k] : {std::pair{1, 1}, {3, 7}, {5, 33}, {64, 1000}, {4, 32}, {2, 4099}}) {
      std::vector<float> w(static_cast<std::size_t>(n * k));
      for (int r = 0; r < n; ++r) {
        const int flavour = r % 4;  // normal, all zero, tiny (scale may underflow), awkward
        for (int i = 0; i < k; ++i) {
          float& x = w[static_cast<std::size_t>(r * k + i)];
          std::uniform_real_distribution<float> d(-3.0f, 3.0f);
          x = flavour == 0 ? d(rng) : flavour == 1 ? 0.0f : flavour == 2 ? d(rng) * 1e-44f : awkward_f32(rng);
        }
      }
      DerivationLaunch s;
      s.kind = Derivation::quant_int8;
      s.src_type = DataType::float32;
      s.rows = n;
      s.cols = k;
      check_against_reference(*b, s, {bytes_of(w)});
      std::vector<std::uint16_t> h(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) h[i] = ref::f16_from_f32(w[i]);
      s.src_type = DataType::float16;
      check_against_reference(*b, s, {bytes_of(h)});
    }
  }
}

TEST_CASE(
    "quant_int8 from f16 and f32: every f16 value under 217 row maxima, where a multiply by 1 / scale may round "
    "apart") {
  // The AVX-512 rows code by w * RN(1 / scale) wherever that lies far
  // enough from a half-integer, and divide otherwise. Each row holds every
  // f16 value from 0 to its maximum (1.0 to 251.9, 37 bit patterns apart),
  // positive then negative: 50 of those quotients round to another code by
  // the multiply than by the division (found by NumPy: exact ties, and
  // lanes within 2^-18 of one), so a guard that lets them through fails.
  // The same values as f32 rows give the same scales and quotients.
  constexpr std::uint16_t kFirst = 0x3c00, kLast = 0x5bf0, kStep = 37;
  constexpr std::uint64_t k = kLast + 1;
  std::vector<std::uint16_t> h;
  std::uint64_t rows = 0;
  for (std::uint32_t max_bits = kFirst; max_bits < kLast; max_bits += kStep, ++rows)
    for (std::uint64_t c = 0; c < k; ++c) {
      const auto bits = static_cast<std::uint16_t>(c % (max_bits + 1));
      h.push_back(static_cast<std::uint16_t>((c / (max_bits + 1)) % 2 == 0 ? bits : bits | 0x8000u));
    }
  DerivationLaunch s;
  s.kind = Derivation::quant_int8;
  s.src_type = DataType::float16;
  s.rows = rows;
  s.cols = k;
  std::vector<float> w(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) w[i] = static_cast<float>(ref::f16_value(h[i]));
  for (const auto& config : kConfigs) {
    auto b = cpu_test::open_cpu(config);
    s.src_type = DataType::float16;
    check_against_reference(*b, s, {bytes_of(h)});
    s.src_type = DataType::float32;
    check_against_reference(*b, s, {bytes_of(w)});
  }
}

TEST_CASE("quant_int8: a row's maximum taken while the row before it is coded, NaN and inf at every position") {
  // The AVX2 and AVX-512 rows take each row's maximum in the loop that
  // codes the row before it (where that row's scale is normal). Rows
  // alternate: an ordinary row, then one with a NaN, +-inf or its largest
  // magnitude at the first element, the last of a 64-element step (and of
  // a 32-element one), the first of the next, or in the tail (of both), so
  // the next row's maximum meets each where the fused loop and its tail
  // would see it.
  constexpr std::uint64_t k = 200;  // three steps of 64 and a tail of 8
  const std::uint64_t positions[] = {0, 63, 64, 197};
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -60000.0f};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> w;
  for (const std::uint64_t at : positions)
    for (const float special : specials)
      for (int row = 0; row < 2; ++row)
        for (std::uint64_t c = 0; c < k; ++c) w.push_back(row == 1 && c == at ? special : d(rng));
  // And a row whose largest magnitude (element 70) has a NaN in its lane
  // one step later (element 134): a maximum that let the NaN replace the
  // lane's running value would lose it.
  for (int row = 0; row < 2; ++row)
    for (std::uint64_t c = 0; c < k; ++c)
      w.push_back(row == 0 ? d(rng) : c == 70 ? 50000.0f : c == 134 ? std::numeric_limits<float>::quiet_NaN() : d(rng));
  std::vector<std::uint16_t> h(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) h[i] = ref::f16_from_f32(w[i]);
  DerivationLaunch s;
  s.kind = Derivation::quant_int8;
  s.rows = w.size() / k;
  s.cols = k;
  for (const auto& config : kConfigs) {
    auto b = cpu_test::open_cpu(config);
    s.src_type = DataType::float32;
    check_against_reference(*b, s, {bytes_of(w)});
    s.src_type = DataType::float16;
    check_against_reference(*b, s, {bytes_of(h)});
  }
}

TEST_CASE("quant_int8: exact ties of both parities and signs, and the clamp reached from both sides") {
  // Row 0: max |w| = 127 held by a negative value (scale 1): w / scale runs
  // through x.5 ties, x even and odd, negative and positive. Row 1: the
  // largest magnitude is a negative f32 subnormal (190 units of 2^-149), the
  // scale rounds down to one unit and w / scale passes +-127.5: only the
  // clamp to [-127, 127] keeps the codes in range. 40 columns: AVX2's 32 and
  // a scalar tail, AVX-512's two sixteens and the tail; 152: AVX-512's two
  // 64s, a sixteen and a tail of 8 (AVX2's four 32s and 24).
  auto rows = [](std::uint64_t k) {  // the ties row, then the clamp row
    std::vector<float> w(2 * k);
    for (std::uint64_t c = 0; c < k; ++c) {
      w[c] = test_cases::quant_int8_ties_row_value(c);
      w[k + c] = test_cases::quant_int8_clamp_row_value(c);
    }
    return w;
  };
  auto shape = [](std::uint64_t k) {
    DerivationLaunch s;
    s.kind = Derivation::quant_int8;
    s.src_type = DataType::float32;
    s.rows = 2;
    s.cols = k;
    return s;
  };
  for (const std::uint64_t k : {std::uint64_t{40}, std::uint64_t{152}}) {
    const std::vector<float> w = rows(k);
    for (const auto& config : kConfigs) {
      auto b = cpu_test::open_cpu(config);
      check_against_reference(*b, shape(k), {bytes_of(w)});
    }
  }
  // The reference itself, by hand: ties to even, and the clamp.
  const std::uint64_t k = 40;
  const std::vector<float> w = rows(k);
  const DerivationLaunch s = shape(k);
  const auto want = ref::derive(s, {std::as_bytes(std::span<const float>(w))});
  REQUIRE(want.ok());
  auto code = [&](std::uint64_t i) { return static_cast<int>(static_cast<std::int8_t>(want->dst[i])); };
  CHECK(code(0) == -127);
  CHECK(code(1) == -8);   // -8.5
  CHECK(code(2) == -8);   // -7.5
  CHECK(code(3) == -6);   // -6.5
  CHECK(code(10) == 0);   // 0.5
  CHECK(code(11) == 2);   // 1.5
  CHECK(code(12) == 2);   // 2.5
  CHECK(code(13) == 4);   // 3.5
  CHECK(code(k + 0) == -127);  // -190 units / 1 unit
  CHECK(code(k + 1) == 127);   // +189
  CHECK(code(k + 2) == -127);  // -128
  CHECK(code(k + 3) == 127);   // +128
}

namespace {

// Runs case `c` with its outputs at a 32-byte aligned address (the
// streamed stores where an output is kStreamBytes or more) and 16 bytes
// further on (some or all stores plain), each against the reference.
void check_streamed_and_not(GpuBackend& b, const test_cases::DerivationCase& c) {
  auto sizes = derivation_sizes(c.shape);
  REQUIRE(sizes.ok());
  auto expected = ref::derive(c.shape, c.inputs());
  REQUIRE(expected.ok());
  DerivationLaunch l = c.shape;
  l.src = upload(b, c.src);
  if (!c.scales.empty()) l.scales = upload(b, c.scales);
  if (!c.zero_points.empty()) l.zero_point = upload(b, c.zero_points);
  const DevicePtr out = guarded_output(b, sizes->dst_bytes + 16);
  const DevicePtr out2 = sizes->dst2_bytes != 0 ? guarded_output(b, sizes->dst2_bytes + 16) : DevicePtr{0};
  REQUIRE(out % 32 == 0);
  for (std::uint64_t offset : {0u, 16u}) {
    l.dst = out + offset;
    l.dst2 = out2 != 0 ? out2 + offset : 0;
    REQUIRE(b.launch(l).ok());
    REQUIRE(b.synchronize().ok());
    const ref::Comparison cmp =
        ref::compare(l, *expected, download(b, l.dst, sizes->dst_bytes),
                     out2 != 0 ? download(b, l.dst2, sizes->dst2_bytes) : std::vector<std::byte>{}, {});
    CHECK_MESSAGE(cmp.ok, c.label << " at offset " << offset << ": " << cmp.mismatches << " mismatches; first: "
                                  << cmp.message);
    INFO(c.label << " at offset " << offset);
    check_untouched_after(b, out, offset + sizes->dst_bytes, "dst");
    if (out2 != 0) check_untouched_after(b, out2, offset + sizes->dst2_bytes, "dst2");
  }
  for (DevicePtr p : {l.src, l.scales, l.zero_point, out, out2})
    if (p != 0) CHECK(b.free(p).ok());
}

}  // namespace

TEST_CASE("every GGUF kind and block type on every kernel table: any scale bits, one block to rows of 4096") {
  // simd=on takes the AVX-512 decoders to f16 where the CPU has them, and
  // simd=avx2 the AVX2 ones: both must give the reference's bits.
  for (const auto& config : kConfigs) {
    auto b = cpu_test::open_cpu(config);
    for (const test_cases::DerivationCase& c : test_cases::kernel_cases()) {
      if (!derivation_kind(c.shape.kind).gguf_blocks) continue;
      INFO(c.label << " simd=" << config.at("simd"));
      check_against_reference(*b, c.shape, c.inputs());
    }
  }
}

TEST_CASE("dequant_gguf outputs large enough to stream: the same bits, aligned (streamed) or not") {
  // Every quantized type's decoder and both outputs.
  auto b = cpu_test::open_cpu({{"threads", "2"}, {"simd", "on"}});
  std::uint64_t seed = 40;
  for (const kinds::GgufBlock& block : kinds::kGgufBlocks) {
    if (block.elements == 1) continue;  // the plain float types have no streamed path
    for (Derivation kind : {Derivation::dequant_gguf, Derivation::dequant_gguf_f32}) {
      const std::uint64_t rows = 16, cols = ballast::cpu::kStreamBytes / 2 / rows;  // f16: exactly the threshold
      check_streamed_and_not(*b, test_cases::gguf_case(kind, block.type, rows, cols / block.elements, false, ++seed));
    }
  }
}

TEST_CASE("transpose, to_f16, int4 and int8 outputs large enough to stream: the same bits, aligned or not") {
  // Streamed where the address allows (32-byte aligned output lines): at
  // offset 16 some lines are stored plainly and some streamed, and a row
  // length that is not a whole number of lines mixes both within a row.
  auto b = cpu_test::open_cpu({{"threads", "2"}, {"simd", "on"}});
  constexpr std::uint64_t kM = ballast::cpu::kStreamBytes;
  const std::vector<test_cases::DerivationCase> cases = {
      test_cases::transpose_case(DataType::float32, 1024, kM / 4 / 1024, 61),  // 8 MiB out, rows of whole lines
      test_cases::transpose_case(DataType::uint8, 4100, kM / 4100 + 1, 62),    // rows not whole lines
      test_cases::transpose_case(DataType::float16, 2048, kM / 2 / 2048, 63),
      test_cases::to_f16_case(DataType::float32, 64, kM / 2 / 64, false, 64),
      test_cases::to_f16_case(DataType::bfloat16, 64, kM / 2 / 64 + 8, false, 65),
      test_cases::int4_case(Derivation::dequant_int4, DataType::float16, ZeroPoints::packed_u4, 64, kM / 2 / 64, 32,
                            false, 66),
      test_cases::int4_case(Derivation::dequant_int4, DataType::float32, ZeroPoints::absent, 64, kM / 2 / 64 + 48, 128,
                            false, 67),
      // K not a multiple of 32 (its last block cut short to 8): every row
      // after the first starts 16 bytes off a line, so nothing may be
      // streamed with aligned stores
      test_cases::int4_case(Derivation::dequant_int4, DataType::float16, ZeroPoints::absent, 64, kM / 2 / 64 + 8, 32,
                            false, 73),
      test_cases::int4_case(Derivation::repack_int4, DataType::float16, ZeroPoints::unpacked, 64, kM * 2 / 64, 64,
                            false, 68),
      test_cases::quant_int8_case(DataType::float32, 16, kM / 16, false, 69),
      test_cases::quant_int8_case(DataType::float16, 16, kM / 16 + 40, false, 70),
      // rows of whole 64-byte lines (AVX-512's), and rows that are not
      test_cases::quant_int8_case(DataType::float32, 256, kM / 256, false, 71),
      test_cases::quant_int8_case(DataType::float16, 200, kM / 200 + 3, false, 72),
  };
  for (const auto& c : cases) check_streamed_and_not(*b, c);
}

TEST_CASE("both kernel tables are in use where the CPU allows") {
  // simd=off must not change a single bit; simd=on must actually select the
  // vector table on a CPU that has it (otherwise the tests above compared
  // the portable table with itself).
  std::mt19937 rng(5);
  std::vector<float> f(4096);
  for (auto& x : f) x = awkward_f32(rng);
  auto on = cpu_test::open_cpu({{"simd", "on"}});
  auto off = cpu_test::open_cpu({{"simd", "off"}});
  // The kernel set is the CPU backend's extension (plugin ABI 1.1's get_proc_address).
  const auto kernel_set = [](ballast::GpuBackend& b) {
    const void* name = b.extension(ballast::cpu::kKernelSetExtension);
    REQUIRE(name != nullptr);
    return std::string(static_cast<const char*>(name));
  };
  const std::string avx2_set = ballast::cpu::simd_kernels() ? ballast::cpu::simd_kernels()->name : "portable";
  const std::string vector_set = ballast::cpu::simd512_kernels() ? ballast::cpu::simd512_kernels()->name : avx2_set;
  CHECK(kernel_set(*on) == vector_set);
  CHECK(kernel_set(*off) == "portable");
  CHECK(kernel_set(*cpu_test::open_cpu({{"simd", "avx2"}})) == avx2_set);
  DerivationLaunch s;
  s.kind = Derivation::to_f16;
  s.src_type = DataType::float32;
  s.rows = 64;
  s.cols = 64;
  std::vector<std::byte> results[2];
  int i = 0;
  for (GpuBackend* b : {on.get(), off.get()}) {
    DerivationLaunch l = s;
    l.src = upload(*b, bytes_of(f));
    l.dst = *b->allocate(8192);
    REQUIRE(b->launch(l).ok());
    results[i++] = download(*b, l.dst, 8192);
    CHECK(b->free(l.src).ok());
    CHECK(b->free(l.dst).ok());
  }
  CHECK(results[0] == results[1]);  // NaN payloads included
}
