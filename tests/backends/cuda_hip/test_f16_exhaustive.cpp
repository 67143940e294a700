// The GPU kernels convert f32 -> f16 with the hardware instruction
// (cvt.rn.f16.f32 on NVIDIA, v_cvt_f16_f32 on AMD: IEEE-754 convertFormat,
// round to nearest even, subnormals kept, overflow to inf). Their host
// branch (elem::hw_f16_from_f32) is kernel_math's integer reference. This
// test proves the two agree for every non-NaN f32 by comparing the
// reference with the x86 hardware's IEEE conversion (F16C vcvtps2ph, the
// same operation), over all 2^32 inputs: about 10 s on two cores. Without
// F16C it compares with the compiler's _Float16 conversion on a stratified
// sample. BALLAST_F16_SAMPLE=1 forces the sample (every exponent, sign and
// the mantissa boundaries, plus a random sample) for slow machines.
#include "cuda_hip/device/derivation_kernels.cuh"

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace ballast;

namespace {

bool is_nan_bits(std::uint32_t x) { return (x & 0x7fffffffu) > 0x7f800000u; }

#if defined(__x86_64__)
// Mismatches among the non-NaN inputs in [begin, end), 8 at a time.
__attribute__((target("avx2,f16c"))) std::uint64_t mismatches_f16c(std::uint64_t begin, std::uint64_t end,
                                                                     std::uint32_t* first_bad) {
  std::uint64_t bad = 0;
  alignas(32) std::uint32_t in[8];
  alignas(16) std::uint16_t hw[8];
  for (std::uint64_t base = begin; base < end; base += 8) {
    for (unsigned i = 0; i < 8; ++i) in[i] = static_cast<std::uint32_t>(base + i);
    const __m256 v = _mm256_load_ps(reinterpret_cast<const float*>(in));
    _mm_store_si128(reinterpret_cast<__m128i*>(hw), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (unsigned i = 0; i < 8; ++i) {
      const std::uint16_t ref = kmath::f16_bits_from_f32(kmath::f32_from_bits(in[i]));
      if (ref != hw[i] && !is_nan_bits(in[i])) {
        if (bad++ == 0) *first_bad = in[i];
      }
    }
  }
  return bad;
}
#endif

std::uint16_t ieee_f16(float f) {
#if defined(__FLT16_MAX__)
  const _Float16 h = static_cast<_Float16>(f);
  std::uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
#else
  return kmath::f16_bits_from_f32(f);
#endif
}

}  // namespace

TEST_CASE("f32 -> f16: the kernels' reference equals the IEEE hardware conversion for every non-NaN f32") {
  const bool sample = std::getenv("BALLAST_F16_SAMPLE") != nullptr;
#if defined(__x86_64__)
  if (!sample && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2")) {
    constexpr unsigned kThreads = 2;
    constexpr std::uint64_t kAll = std::uint64_t(1) << 32;
    std::vector<std::uint64_t> bad(kThreads);
    std::vector<std::uint32_t> first(kThreads);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < kThreads; ++t)
      pool.emplace_back([&, t] { bad[t] = mismatches_f16c(kAll / kThreads * t, kAll / kThreads * (t + 1), &first[t]); });
    for (auto& th : pool) th.join();
    for (unsigned t = 0; t < kThreads; ++t) {
      CAPTURE(first[t]);
      CHECK(bad[t] == 0);
    }
    MESSAGE("compared all 2^32 f32 inputs with F16C vcvtps2ph");
    return;
  }
#endif
  // Stratified: every sign and exponent with the mantissas around each
  // rounding boundary (low 13 bits near 0, half and full), plus random.
  std::mt19937 rng(16);
  std::uint64_t checked = 0;
  for (std::uint32_t se = 0; se < 512; ++se) {
    for (std::uint32_t hi = 0; hi < 1024; hi += 17) {
      for (std::uint32_t lo : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu, 0x800u, 0x7ffu}) {
        const std::uint32_t x = (se << 23) | (hi << 13) | lo;
        if (is_nan_bits(x)) continue;
        REQUIRE(kmath::f16_bits_from_f32(kmath::f32_from_bits(x)) == ieee_f16(kmath::f32_from_bits(x)));
        ++checked;
      }
    }
  }
  for (int i = 0; i < 4000000; ++i) {
    const std::uint32_t x = rng();
    if (is_nan_bits(x)) continue;
    REQUIRE(kmath::f16_bits_from_f32(kmath::f32_from_bits(x)) == ieee_f16(kmath::f32_from_bits(x)));
    ++checked;
  }
  MESSAGE("compared " << checked << " f32 inputs with the compiler's IEEE conversion");
}

TEST_CASE("f16 -> f32: the kernels' reference equals the IEEE conversion for every f16") {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float ref = kmath::f32_from_f16_bits(static_cast<std::uint16_t>(h));
#if defined(__FLT16_MAX__)
    _Float16 v;
    const auto bits = static_cast<std::uint16_t>(h);
    std::memcpy(&v, &bits, 2);
    const float ieee = static_cast<float>(v);
    if (std::isnan(ieee)) {
      CHECK(std::isnan(ref));
    } else {
      CHECK(kmath::f32_bits(ref) == kmath::f32_bits(ieee));
    }
#endif
  }
}

TEST_CASE("quant_int8 codes: clamping before a hardware round-half-even equals the reference") {
  // The device branch of elem::hw_quant_code: q = w / scale (IEEE), 0 for
  // NaN, fminf/fmaxf to [-127, 127], then cvt.rni (round half even).
  std::mt19937 rng(8);
  const auto model = [](float w, float scale) -> std::int8_t {
    if (scale == 0.0f) return 0;
    const float r = w / scale;
    if (r != r) return 0;
    return static_cast<std::int8_t>(std::nearbyint(std::fmin(std::fmax(r, -127.0f), 127.0f)));
  };
  for (int i = 0; i < 2000000; ++i) {
    const float w = kmath::f32_from_bits(rng());
    const float scale = i % 3 == 0 ? kmath::f32_from_bits(rng()) : std::ldexp(static_cast<float>(rng() % 4096), -12);
    REQUIRE(model(w, scale) == kmath::quant_int8_code(w, scale));
  }
  for (float half = -127.5f; half <= 127.5f; half += 0.5f) REQUIRE(model(half, 1.0f) == kmath::quant_int8_code(half, 1.0f));
}

TEST_CASE("quant_int8 codes by one reciprocal per row equal the reference") {
  // elem::quant_code_by_inverse: w * (1/scale), exact division only near
  // half-integers. Every w of many rows, including quotients exactly at and
  // one ulp around every half-integer, and rows with extreme scales.
  std::mt19937 rng(9);
  std::uint64_t checked = 0;
  const auto check_row = [&](float max_abs, const auto& values) {
    const gpu::elem::QuantScale q = gpu::elem::quant_scale(max_abs);
    for (float w : values) {
      if (std::fabs(w) > max_abs) continue;
      REQUIRE(gpu::elem::quant_code_by_inverse(w, q.scale, q.inv, q.inv_ok) ==
              static_cast<std::uint8_t>(kmath::quant_int8_code(w, q.scale)));
      ++checked;
    }
  };
  for (int row = 0; row < 3000; ++row) {
    float max_abs = std::ldexp(1.0f + static_cast<float>(rng() % 100000) / 100000.0f, static_cast<int>(rng() % 60) - 30);
    if (row % 100 == 0) max_abs = kmath::f32_from_bits(rng() & 0x7f7fffffu);  // any finite magnitude
    if (row % 500 == 1) max_abs = 1e-40f;                                       // subnormal: scale underflows
    if (row % 500 == 2) max_abs = 3e38f;
    const float scale = kmath::quant_int8_scale(max_abs);
    std::vector<float> values;
    for (int k = -127; k <= 127; ++k) {
      const float half = (static_cast<float>(k) + 0.5f) * scale;  // quotients at and around k + 0.5
      for (float v : {half, std::nextafter(half, 0.0f), std::nextafter(half, 1e30f), std::nextafter(half, -1e30f),
                      static_cast<float>(k) * scale}) {
        values.push_back(v);
        values.push_back(-v);
      }
    }
    for (int i = 0; i < 300; ++i) values.push_back(max_abs * (static_cast<float>(rng() % 2000001) / 1000000.0f - 1.0f));
    values.push_back(max_abs);
    values.push_back(-max_abs);
    values.push_back(std::numeric_limits<float>::quiet_NaN());
    check_row(max_abs, values);
  }
  check_row(std::numeric_limits<float>::infinity(), std::vector<float>{1.0f, -2.0f, 0.0f, std::numeric_limits<float>::infinity()});
  check_row(0.0f, std::vector<float>{0.0f, -0.0f});
  MESSAGE("checked " << checked << " codes");
}
