// The value generators of derivation_cases.hpp.
#include "support/derivation_cases.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace ballast::test_cases {
namespace {

}  // namespace

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t r = rng();
    std::memcpy(out.data() + i, &r, 8);
  }
  if (i < n) {
    const std::uint64_t r = rng();
    std::memcpy(out.data() + i, &r, n - i);
  }
  return out;
}

std::vector<std::byte> random_bytes(std::mt19937& rng, std::uint64_t n) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

std::vector<std::byte> random_f32(std::mt19937& rng, std::uint64_t count, float lo, float hi, bool specials) {
  std::uniform_real_distribution<float> value(lo, hi);
  // clang-format off
  static const float kSpecial[] = {0.0f, -0.0f, 1e-40f, -3e-8f, 65519.0f, 65520.0f, -1e9f, 5.9604645e-8f,
                                   std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  // clang-format on
  std::vector<std::byte> out(count * 4);
  for (std::uint64_t i = 0; i < count; ++i) {
    float f = value(rng);
    if (specials && rng() % 13 == 0) f = kSpecial[rng() % std::size(kSpecial)];
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

std::vector<std::byte> random_f16(std::mt19937& rng, std::uint64_t count, unsigned max_exponent) {
  std::vector<std::byte> out(count * 2);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint16_t sign = (rng() & 1) << 15;
    const std::uint16_t exponent = static_cast<std::uint16_t>(rng() % (max_exponent + 1));
    const std::uint16_t bits = sign | static_cast<std::uint16_t>(exponent << 10) | (rng() & 0x3ff);
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

float awkward_f32(std::mt19937& rng) {
  // clang-format off
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65520.0f, -65519.996f,
                                  std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -26),
                                  std::ldexp(1.0f, -14), 1.0f + std::ldexp(1.0f, -11), 1e-45f, 3.4e38f};
  // clang-format on
  const std::uint32_t pick = rng() % 8;
  if (pick == 0) return special[rng() % std::size(special)];
  if (pick < 4) {  // in f16 range, including its subnormals
    const std::uint32_t e = 127 - 26 + rng() % 42;
    std::uint32_t bits = (rng() & 0x807fffffu) | (e << 23);
    return std::bit_cast<float>(bits);
  }
  return std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
}

std::vector<float> awkward_floats(std::size_t count, std::uint32_t seed) {
  // clang-format off
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 65504.0f, 65519.996f, 65520.0f, -70000.0f, 6.0e-8f, 2.9e-8f,
                          3.0e-8f, 6.1e-5f, 6.0e-5f, 1.0e-40f, -1.0e-45f, 0.333333f};
  // clang-format on
  const std::uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc12345u, 0x7f800001u,
                                    0x387fe000u, 0x33000000u, 0x33000001u, 0x337fffffu, 0x38800000u - 1u};
  for (std::uint32_t s : specials) v.push_back(std::bit_cast<float>(s));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  while (v.size() < count) v.push_back(v.size() % 3 == 0 ? std::bit_cast<float>(bits(rng)) : normal(rng));
  v.resize(count);
  return v;
}

const std::vector<float>& f32_specials() {
  // clang-format off
  static const std::vector<float> v = {
      0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::bit_cast<float>(0x7fc00000u), std::bit_cast<float>(0xffc00000u), std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0x7fbfffffu),
      std::bit_cast<float>(0xffc12345u), 65504.0f, -65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e10f, -3.0e38f,
      std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), 1e-40f, -1e-42f,
      std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -26), std::ldexp(1.0f, -26),
      -std::ldexp(5.0f, -26), std::ldexp(1.0f, -14), std::ldexp(1023.0f, -24), std::ldexp(2047.0f, -25),
      1.0f + std::ldexp(1.0f, -11), 1.0f + std::ldexp(3.0f, -11), -(1.0f + std::ldexp(1.0f, -11)),
      2048.0f + 1.0f, 2048.0f + 3.0f, 0.1f, -0.3333333f, 6.1035156e-05f, 6.097555e-05f};
  // clang-format on
  return v;
}

const std::vector<std::uint16_t>& half_specials() {
  static const std::vector<std::uint16_t> v = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7f80,
                                               0xff80, 0x7fc0, 0x7f81, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff,
                                               0xfbff, 0x477f, 0x4780, 0x47ff, 0x3380, 0x3300, 0x3f80};
  return v;
}

float quant_int8_ties_row_value(std::uint64_t col) { return col == 0 ? -127.0f : static_cast<float>(col % 20) - 9.5f; }

float quant_int8_clamp_row_value(std::uint64_t col) {
  static const int units[] = {-190, 189, -128, 128, -127, 127, -126, 1, -1, 0};
  const int u = units[col % 10];
  return std::bit_cast<float>(static_cast<std::uint32_t>(u < 0 ? -u : u) | (u < 0 ? 0x80000000u : 0u));
}

std::vector<float> quant_int8_awkward_rows(std::uint64_t k) {
  std::vector<float> w(8 * k, 0.0f);  // row 0: all zero
  for (std::uint64_t c = 0; c < k; ++c) {
    w[1 * k + c] = std::bit_cast<float>(static_cast<std::uint32_t>(1 + 37 * c)) * (c % 2 ? -1.0f : 1.0f);  // subnormals
    w[2 * k + c] = static_cast<float>(c) - 9.0f;
    w[3 * k + c] = static_cast<float>(c) * 0.25f;
    w[4 * k + c] = 1.0e-37f * static_cast<float>(c + 1);  // scale underflows into subnormals
    w[5 * k + c] = -1.0e-3f * static_cast<float>(c);
    w[6 * k + c] = quant_int8_ties_row_value(c);
    w[7 * k + c] = quant_int8_clamp_row_value(c);  // zero in f16
  }
  if (k > 5) {
    w[2 * k + 4] = std::numeric_limits<float>::quiet_NaN();
    w[3 * k + 5] = std::numeric_limits<float>::infinity();
  }
  return w;
}

}  // namespace ballast::test_cases
