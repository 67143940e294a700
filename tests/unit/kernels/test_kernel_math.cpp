// backends/common/kernel_math.hpp (shared by the CPU, CUDA, HIP and Vulkan
// kernels) against the independent scalar references: exhaustive over every
// 16-bit input, a strided sweep of f32 plus every f16 rounding boundary.
#include <common/gguf_blocks.hpp>
#include <common/kernel_math.hpp>
#include <reference/reference.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <ios>
#include <random>

namespace km = ballast::kmath;
namespace ref = ballast::reference;

namespace {

bool same_f16(std::uint16_t a, std::uint16_t b) { return a == b || (ref::f16_is_nan(a) && ref::f16_is_nan(b)); }

// Checks one f32 -> f16 conversion; counts and reports only the first few.
struct F16Check {
  int failures = 0;
  void operator()(float f) {
    const std::uint16_t got = km::f16_bits_from_f32(f);
    const std::uint16_t want = ref::f16_from_f32(f);
    if (same_f16(got, want)) return;
    if (++failures <= 5) FAIL_CHECK("f32 " << std::hexfloat << f << ": kernel " << got << ", reference " << want);
  }
};

}  // namespace

TEST_CASE("f16 -> f32 is exact for every f16, NaN stays NaN") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float got = km::f32_from_f16_bits(static_cast<std::uint16_t>(h));
    const double want = ref::f16_value(static_cast<std::uint16_t>(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE(std::signbit(got) == std::signbit(want));
    }
  }
}

TEST_CASE("bf16 -> f32 and bf16 -> f16 for every bf16") {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float got = km::f32_from_bf16_bits(bits);
    const double want = ref::bf16_value(bits);
    if (std::isnan(want)) REQUIRE(std::isnan(got));
    else REQUIRE(static_cast<double>(got) == want);
    REQUIRE(same_f16(km::f16_bits_from_bf16_bits(bits), ref::f16_from_double(want)));
  }
}

TEST_CASE("f32 -> f16 at every f16 value and rounding boundary") {
  F16Check check;
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {
    const double lo = ref::f16_value(static_cast<std::uint16_t>(h));
    const double hi = h == 0x7bff ? 65536.0 : ref::f16_value(static_cast<std::uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in f32
    for (float f : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      check(f);
      check(-f);
    }
  }
  for (float f : {0.0f, 65504.0f, 65519.996f, 65520.0f, 65536.0f, 3.4e38f, INFINITY, 1e-45f, 1e-38f,
                  std::ldexp(1.0f, -25), std::ldexp(1.0f, -24), std::ldexp(1.0f, -14), std::ldexp(1.0f, -26)}) {
    check(f);
    check(-f);
  }
  CHECK(check.failures == 0);
  CHECK(km::f16_bits_from_f32(65520.0f) == 0x7c00);
  CHECK(km::f16_bits_from_f32(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(km::f16_bits_from_f32(-INFINITY) == 0xfc00);
}

TEST_CASE("f32 -> f16 over a strided sweep of all f32 bit patterns") {
  F16Check check;
  // 4099 is prime, so the sweep visits every exponent and varied mantissa bits.
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) check(km::f32_from_bits(static_cast<std::uint32_t>(u)));
  CHECK(check.failures == 0);
}

TEST_CASE("f32 -> f16 keeps NaN a quiet NaN with its sign") {
  for (std::uint32_t payload : {1u, 0x1fffu, 0x2000u, 0x3fffffu, 0x400000u, 0x7fffffu}) {
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const std::uint16_t h = km::f16_bits_from_f32(km::f32_from_bits(sign | 0x7f800000u | payload));
      CHECK(ref::f16_is_nan(h));
      CHECK((h & 0x0200u) != 0);  // quiet
      CHECK((h & 0x8000u) == (sign >> 16));
    }
  }
}

TEST_CASE("round_half_even agrees with nearbyint") {
  for (int i = -4000; i <= 4000; ++i) {
    const float f = static_cast<float>(i) * 0.125f;
    REQUIRE(km::round_half_even(f) == static_cast<std::int32_t>(ref::round_half_even(f)));
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3e7f, 3e7f);
  for (int i = 0; i < 100000; ++i) {
    const float f = dist(rng);
    REQUIRE(km::round_half_even(f) == static_cast<std::int32_t>(ref::round_half_even(f)));
  }
  CHECK(km::round_half_even(0.49999997f) == 0);
  CHECK(km::round_half_even(-0.5f) == 0);
  CHECK(km::round_half_even(8388609.0f) == 8388609);
  CHECK(km::round_half_even(127.49999f) == 127);
}

TEST_CASE("int4 codes, zero points and the repack nibble order") {
  const std::uint8_t row[3] = {0x21, 0x43, 0xf0};
  const std::uint32_t want[6] = {1, 2, 3, 4, 0, 15};
  for (std::uint64_t k = 0; k < 6; ++k) CHECK(km::int4_code(row, k) == want[k]);

  // Packed zero points for N = 2, k_blocks = 3: two bytes per row.
  const std::uint8_t zp[4] = {0x21, 0x03, 0x54, 0x06};
  CHECK(km::zero_point_packed(zp, 3, 0, 2) == 3.0f);
  CHECK(km::zero_point_packed(zp, 3, 1, 0) == 4.0f);
  CHECK(km::zero_point_packed(zp, 3, 1, 2) == 6.0f);
  const float zpf[4] = {1.5f, 2, 3, 4};
  CHECK(km::zero_point_f32(zpf, 2, 1, 1) == 4.0f);
  const std::uint16_t zph[2] = {0x3e00, 0x4a00};
  CHECK(km::zero_point_f16(zph, 2, 0, 1) == 12.0f);

  for (std::uint32_t i = 0; i < 8; ++i) {
    CHECK(km::repack_column_of_nibble(i) == km::kRepackNibbleOrder[i]);
    CHECK(km::repack_nibble_of_column(km::repack_column_of_nibble(i)) == i);
  }
  const std::uint32_t codes[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(km::repack_word(codes) == 0x75316420u);

  CHECK(km::zero_point_code(8.0f) == 8);
  CHECK(km::zero_point_code(2.5f) == 2);
  CHECK(km::zero_point_code(3.5f) == 4);
  CHECK(km::zero_point_code(-1.0f) == 0);
  CHECK(km::zero_point_code(99.0f) == 15);
  CHECK(km::zero_point_code(NAN) == 8);
}

TEST_CASE("dequant value and scale pairs agree with the reference arithmetic") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0xffffffffu);
  const float zps[] = {8.0f, 0.0f, 15.0f, 7.25f, -3.0f};
  for (int i = 0; i < 20000; ++i) {
    // Scales spread over every exponent, including ones that overflow or
    // underflow f16 once multiplied.
    const float scale = km::f32_from_bits(bits(rng) & 0xbfffffffu);
    for (float zp : zps)
      for (std::uint32_t q = 0; q < 16; ++q) {
        const float expected = (static_cast<float>(q) - zp) * scale;
        REQUIRE(same_f16(km::dequant_f16_bits(q, zp, scale), ref::f16_from_f32(expected)));
      }
    const std::uint32_t pair = km::repack_scale_pair(scale, zps[i % 5]);
    REQUIRE(same_f16(static_cast<std::uint16_t>(pair & 0xffff), ref::f16_from_f32(scale)));
    REQUIRE(same_f16(static_cast<std::uint16_t>(pair >> 16), ref::f16_from_f32(-(scale * zps[i % 5]))));
  }
}

TEST_CASE("int8 quantisation arithmetic") {
  CHECK(km::kInvInt8Max == 1.0f / 127.0f);
  CHECK(km::quant_int8_scale(254.0f) == 2.0f);
  CHECK(km::abs_max_step(1.0f, -3.0f) == 3.0f);
  CHECK(km::abs_max_step(1.0f, NAN) == 1.0f);
  CHECK(km::quant_int8_code(-127.0f, 2.0f) == -64);
  CHECK(km::quant_int8_code(1.0f, 2.0f) == 0);
  CHECK(km::quant_int8_code(3.0f, 2.0f) == 2);
  CHECK(km::quant_int8_code(5.0f, 0.0f) == 0);
  CHECK(km::quant_int8_code(INFINITY, 1.0f) == 127);
  CHECK(km::quant_int8_code(-INFINITY, 1.0f) == -127);
  CHECK(km::quant_int8_code(NAN, 1.0f) == 0);
  CHECK(km::quant_int8_code(1.0f, INFINITY) == 0);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float w = dist(rng), m = std::fabs(dist(rng)) + std::fabs(w);
    const float scale = km::quant_int8_scale(m);
    const double r = ref::round_half_even(static_cast<double>(w / scale));
    REQUIRE(km::quant_int8_code(w, scale) == static_cast<int>(std::fmax(-127.0, std::fmin(127.0, r))));
  }
}

// k_group (gguf_blocks.hpp, the GPU kernels' group decode) against
// block_value element by element, for every group of every K-quant, on
// random blocks whose scales are finite f16 (so equal values mean equal
// bits), at each alignment the kernels use: byte, 2-byte and word reads.
TEST_CASE("k_group gives block_value's bits for every group of every K-quant") {
  namespace g = km::gguf;
  struct KType {
    std::uint32_t type, bytes;
    std::initializer_list<std::uint32_t> f16_at;  // offsets of the f16 scales
  };
  const KType types[] = {{g::kQ2_K, 84, {80, 82}},
                         {g::kQ3_K, 110, {108}},
                         {g::kQ4_K, 144, {0, 2}},
                         {g::kQ5_K, 176, {0, 2}},
                         {g::kQ6_K, 210, {208}}};
  std::mt19937 rng(20261205);
  for (const KType& t : types) {
    for (int trial = 0; trial < 64; ++trial) {
      alignas(16) std::uint8_t block[224] = {};
      for (std::uint32_t i = 0; i < t.bytes; ++i) block[i] = static_cast<std::uint8_t>(rng());
      for (std::uint32_t at : t.f16_at) {  // normal f16 scales: no NaN, so equal bits are the test
        const std::uint16_t bits =
            static_cast<std::uint16_t>(((rng() & 1u) << 15) | ((1u + rng() % 30u) << 10) | (rng() & 1023u));
        std::memcpy(block + at, &bits, 2);
      }
      for (std::uint32_t i0 = 0; i0 < 256; i0 += 8) {
        float w1[8], w2[8], w4[8];
        REQUIRE(g::k_group<1>(t.type, block, i0, w1));
        REQUIRE(g::k_group<2>(t.type, block, i0, w2));
        REQUIRE(g::k_group<4>(t.type, block, i0, w4));
        for (std::uint32_t j = 0; j < 8; ++j) {
          const float want = g::block_value(t.type, block, i0 + j);
          const auto bits = [](float f) {
            std::uint32_t u;
            std::memcpy(&u, &f, 4);
            return u;
          };
          if (bits(w1[j]) != bits(want) || bits(w2[j]) != bits(want) || bits(w4[j]) != bits(want))
            FAIL_CHECK("type " << t.type << " element " << i0 + j << ": " << w1[j] << " / " << w2[j] << " / " << w4[j]
                               << ", block_value " << want);
        }
      }
    }
  }
  float untouched[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  const std::uint8_t none[32] = {};
  CHECK_FALSE(g::k_group<4>(g::kQ4_0, none, 0, untouched));
  CHECK(untouched[3] == 7.0f);
}
