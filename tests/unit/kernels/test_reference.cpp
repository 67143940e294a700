// The scalar references checked against values worked out by hand from the
// format description, so that the yardstick itself is known to be right.
#include <reference/reference.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace ballast;
namespace ref = ballast::reference;

namespace {

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
std::vector<T> values_of(const std::vector<std::byte>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

ref::Outputs run(const DerivationLaunch& shape, const ref::Inputs& in) {
  auto out = ref::derive(shape, in);
  REQUIRE_MESSAGE(out.ok(), out.error().to_string());
  return std::move(out.value());
}

DerivationLaunch int4_shape(Derivation kind, std::uint64_t n, std::uint64_t k, ZeroPoints zp,
                            DataType scales = DataType::float32) {
  DerivationLaunch s;
  s.kind = kind;
  s.src_type = scales;
  s.rows = n;
  s.cols = k;
  s.block_size = 16;
  s.zero_points = zp;
  return s;
}

}  // namespace

TEST_CASE("f16 decoding by value") {
  CHECK(ref::f16_value(0x3c00) == 1.0);
  CHECK(ref::f16_value(0x3555) == 0.333251953125);
  CHECK(ref::f16_value(0x0001) == std::ldexp(1.0, -24));
  CHECK(ref::f16_value(0x03ff) == std::ldexp(1023.0, -24));
  CHECK(ref::f16_value(0x0400) == std::ldexp(1.0, -14));
  CHECK(ref::f16_value(0x7bff) == 65504.0);
  CHECK(ref::f16_value(0xc000) == -2.0);
  CHECK(ref::f16_value(0xfc00) == -INFINITY);
  CHECK(std::isnan(ref::f16_value(0x7c01)));
  CHECK(std::signbit(ref::f16_value(0x8000)));
}

TEST_CASE("bf16 decoding by value") {
  CHECK(ref::bf16_value(0x3f80) == 1.0);
  CHECK(ref::bf16_value(0xc000) == -2.0);
  CHECK(ref::bf16_value(0x3fc0) == 1.5);
  CHECK(ref::bf16_value(0x0001) == std::ldexp(1.0, -133));
  CHECK(ref::bf16_value(0x7f80) == INFINITY);
  CHECK(std::isnan(ref::bf16_value(0xffc1)));
}

TEST_CASE("f16 rounding: nearest, ties to even, overflow, subnormals") {
  CHECK(ref::f16_from_double(1.0) == 0x3c00);
  CHECK(ref::f16_from_double(0.1) == 0x2e66);
  CHECK(ref::f16_from_double(1.0 / 3.0) == 0x3555);
  CHECK(ref::f16_from_double(-0.0) == 0x8000);
  CHECK(ref::f16_from_double(1.0 + std::ldexp(1.0, -11)) == 0x3c00);      // tie: 0x3c00 is even
  CHECK(ref::f16_from_double(1.0 + 3 * std::ldexp(1.0, -11)) == 0x3c02);  // tie: 0x3c02 is even
  CHECK(ref::f16_from_double(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30)) == 0x3c01);
  CHECK(ref::f16_from_double(65504.0) == 0x7bff);
  CHECK(ref::f16_from_double(65519.99) == 0x7bff);
  CHECK(ref::f16_from_double(65520.0) == 0x7c00);  // tie between 65504 and 2^16: overflow
  CHECK(ref::f16_from_double(-1e9) == 0xfc00);
  CHECK(ref::f16_from_double(INFINITY) == 0x7c00);
  CHECK(ref::f16_from_double(std::ldexp(1.0, -24)) == 0x0001);
  CHECK(ref::f16_from_double(std::ldexp(1.0, -25)) == 0x0000);  // tie with zero
  CHECK(ref::f16_from_double(std::ldexp(1.0, -25) * 1.0000001) == 0x0001);
  CHECK(ref::f16_from_double(3 * std::ldexp(1.0, -25)) == 0x0002);
  CHECK(ref::f16_from_double(-std::ldexp(1.0, -14)) == 0x8400);
  CHECK(ref::f16_from_double(std::ldexp(1.0, -14) - std::ldexp(1.0, -25)) == 0x0400);  // tie: 0x400 even
  CHECK(ref::f16_from_double(std::ldexp(1.0, -100)) == 0x0000);
  CHECK(ref::f16_is_nan(ref::f16_from_double(NAN)));
  CHECK(ref::round_half_even(2.5) == 2.0);
  CHECK(ref::round_half_even(-3.5) == -4.0);
  CHECK(ref::round_half_even(0.5) == 0.0);
}

TEST_CASE("transpose reference") {
  DerivationLaunch s;
  s.kind = Derivation::transpose;
  s.src_type = DataType::uint16;
  s.rows = 2;
  s.cols = 3;
  const auto src = bytes_of<std::uint16_t>({1, 2, 3, 4, 5, 6});
  const auto out = run(s, {src});
  CHECK(values_of<std::uint16_t>(out.dst) == std::vector<std::uint16_t>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("to_f16 reference from f32 and bf16") {
  DerivationLaunch s;
  s.kind = Derivation::to_f16;
  s.src_type = DataType::float32;
  s.rows = 1;
  s.cols = 4;
  auto out = run(s, {bytes_of<float>({1.0f, -2.0f, 1e6f, 0.1f})});
  CHECK(values_of<std::uint16_t>(out.dst) == std::vector<std::uint16_t>{0x3c00, 0xc000, 0x7c00, 0x2e66});
  s.src_type = DataType::bfloat16;
  out = run(s, {bytes_of<std::uint16_t>({0x3f80, 0xc000, 0x3fc0, 0x7f80})});
  CHECK(values_of<std::uint16_t>(out.dst) == std::vector<std::uint16_t>{0x3c00, 0xc000, 0x3e00, 0x7c00});
}

TEST_CASE("dequant_int4 reference, zero points absent") {
  // One block of codes 0..15, scale 0.5, zero point 8: (q - 8) / 2.
  const auto b = bytes_of<std::uint8_t>({0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe});
  const auto scales = bytes_of<float>({0.5f});
  const auto out = run(int4_shape(Derivation::dequant_int4, 1, 16, ZeroPoints::absent), {b, scales});
  const auto v = values_of<std::uint16_t>(out.dst);
  REQUIRE(v.size() == 16);
  for (int q = 0; q < 16; ++q) CHECK(ref::f16_value(v[q]) == (q - 8) * 0.5);
}

TEST_CASE("dequant_int4 reference, packed and unpacked zero points, K not a multiple of block_size") {
  // N = 1, K = 40, block 16: three blocks, the last one 8 columns long.
  // Every code is 5 (0x55 bytes); scales 1, 2, 4.
  const std::vector<std::byte> b(3 * 8, std::byte{0x55});
  const auto scales = bytes_of<float>({1.0f, 2.0f, 4.0f});
  SUBCASE("packed: zero points 1, 2, 3 in bytes 0x21 0x03") {
    const auto zp = bytes_of<std::uint8_t>({0x21, 0x03});
    const auto v = values_of<std::uint16_t>(
        run(int4_shape(Derivation::dequant_int4, 1, 40, ZeroPoints::packed_u4), {b, scales, zp}).dst);
    REQUIRE(v.size() == 40);
    CHECK(ref::f16_value(v[0]) == (5 - 1) * 1.0);
    CHECK(ref::f16_value(v[15]) == (5 - 1) * 1.0);
    CHECK(ref::f16_value(v[16]) == (5 - 2) * 2.0);
    CHECK(ref::f16_value(v[39]) == (5 - 3) * 4.0);
  }
  SUBCASE("unpacked f16 scales and zero points") {
    const auto hscales = bytes_of<std::uint16_t>({0x3c00, 0x4000, 0x4400});   // 1, 2, 4
    const auto zp = bytes_of<std::uint16_t>({0x3e00, 0x0000, 0x4a00});        // 1.5, 0, 12
    const auto v = values_of<std::uint16_t>(
        run(int4_shape(Derivation::dequant_int4, 1, 40, ZeroPoints::unpacked, DataType::float16), {b, hscales, zp})
            .dst);
    CHECK(ref::f16_value(v[3]) == 3.5);
    CHECK(ref::f16_value(v[20]) == 10.0);
    CHECK(ref::f16_value(v[33]) == -28.0);
  }
}

TEST_CASE("repack_int4 reference: nibble order, padding, scale pairs") {
  // N = 1, K = 10: codes 0..9 then padding; zero point absent (8), scale 0.5.
  const auto b = bytes_of<std::uint8_t>({0x10, 0x32, 0x54, 0x76, 0x98, 0x00, 0x00, 0x00});
  const auto scales = bytes_of<float>({0.5f});
  const auto out = run(int4_shape(Derivation::repack_int4, 1, 10, ZeroPoints::absent), {b, scales});
  // Word 0: nibbles hold columns 0,2,4,6,1,3,5,7.  Word 1: columns 8,10,12,14,9,11,13,15,
  // of which only 8 and 9 exist; the rest hold the zero point 8.
  CHECK(values_of<std::uint32_t>(out.dst) == std::vector<std::uint32_t>{0x75316420u, 0x88898888u});
  CHECK(values_of<std::uint16_t>(out.dst2) == std::vector<std::uint16_t>{0x3800, 0xc400});  // 0.5, -4
}

TEST_CASE("repack_int4 reference: padding holds the unpacked zero point's code") {
  const std::vector<std::byte> b(8, std::byte{0x11});
  const auto scales = bytes_of<float>({2.0f});
  const auto zp = bytes_of<float>({2.5f});  // rounds half-even to code 2
  const auto out = run(int4_shape(Derivation::repack_int4, 1, 4, ZeroPoints::unpacked), {b, scales, zp});
  // columns 0..3 are code 1 (nibbles 0,4,1,5), columns 4..7 padding 2 (nibbles 2,6,3,7)
  CHECK(values_of<std::uint32_t>(out.dst) == std::vector<std::uint32_t>{0x22112211u});
  CHECK(values_of<std::uint16_t>(out.dst2) == std::vector<std::uint16_t>{0x4000, 0xc500});  // 2, -5
}

TEST_CASE("quant_int8 reference") {
  DerivationLaunch s;
  s.kind = Derivation::quant_int8;
  s.src_type = DataType::float32;
  s.rows = 3;
  s.cols = 4;
  // Row 0: max 254 so scale is exactly 2: ties -63.5 -> -64 and 0.5 -> 0.
  // Row 1: all zero. Row 2: max 3.
  const auto out = run(s, {bytes_of<float>({0.0f, 254.0f, -127.0f, 1.0f, 0, 0, -0.0f, 0, 3.0f, -1.0f, 0.7f, 2.5f})});
  CHECK(values_of<std::int8_t>(out.dst) == std::vector<std::int8_t>{0, 127, -64, 0, 0, 0, 0, 0, 127, -42, 30, 106});
  const auto scales = values_of<float>(out.dst2);
  CHECK(scales[0] == 2.0f);
  CHECK(scales[1] == 0.0f);
  CHECK(scales[2] == 3.0f * (1.0f / 127.0f));
}

TEST_CASE("quant_int8 reference from f16, NaN ignored in the max") {
  DerivationLaunch s;
  s.kind = Derivation::quant_int8;
  s.src_type = DataType::float16;
  s.rows = 1;
  s.cols = 3;
  const auto out = run(s, {bytes_of<std::uint16_t>({0x3c00, 0xbc00, 0x7e00})});  // 1, -1, NaN
  CHECK(values_of<std::int8_t>(out.dst) == std::vector<std::int8_t>{127, -127, 0});
  CHECK(values_of<float>(out.dst2)[0] == 1.0f / 127.0f);
}

TEST_CASE("reference refuses short inputs and bad shapes") {
  DerivationLaunch s = int4_shape(Derivation::dequant_int4, 2, 16, ZeroPoints::packed_u4);
  const std::vector<std::byte> b(16), scales(8), zp(1);
  auto r = ref::derive(s, {b, scales, zp});
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == ErrorCode::size_mismatch);
  CHECK(r.error().message.find("zero_points") != std::string::npos);
  s.block_size = 24;
  CHECK(ref::derive(s, {b, scales, zp}).code() == ErrorCode::invalid_argument);
}

TEST_CASE("comparison tolerances and first-mismatch message") {
  DerivationLaunch s;
  s.kind = Derivation::quant_int8;
  s.src_type = DataType::float32;
  s.rows = 2;
  s.cols = 2;
  ref::Outputs expected{bytes_of<std::int8_t>({10, 20, 30, 40}), bytes_of<float>({1.0f, NAN})};
  auto got_codes = bytes_of<std::int8_t>({11, 20, 30, 40});
  auto got_scales = bytes_of<float>({1.0f, -NAN});
  // Codes are exact unless the backend declares it cannot round them correctly.
  auto exact = ref::compare(s, expected, got_codes, got_scales);
  CHECK_FALSE(exact.ok);
  CHECK(exact.message == "dst[0] (row 0, col 0): expected 10, got 11");
  CHECK(ref::compare(s, expected, got_codes, got_scales, {.int8_codes_within_one = true}).ok);  // off by one allowed
  CHECK(ref::compare(s, expected, bytes_of<std::int8_t>({10, 20, 30, 40}), got_scales).ok);  // NaN payload/sign
  got_codes = bytes_of<std::int8_t>({10, 20, 30, 42});
  auto c = ref::compare(s, expected, got_codes, got_scales);
  CHECK_FALSE(c.ok);
  CHECK(c.mismatches == 1);
  CHECK(c.message == "dst[3] (row 1, col 1): expected 40, got 42");
  got_scales = bytes_of<float>({1.5f, NAN});
  c = ref::compare(s, expected, bytes_of<std::int8_t>({10, 20, 30, 40}), got_scales);
  CHECK(c.message.find("dst2[0]") == 0);

  DerivationLaunch h;
  h.kind = Derivation::to_f16;
  h.src_type = DataType::float32;
  h.rows = 1;
  h.cols = 2;
  const ref::Outputs sub{bytes_of<std::uint16_t>({0x8001, 0x3c00}), {}};
  const auto flushed = bytes_of<std::uint16_t>({0x8000, 0x3c00});
  CHECK_FALSE(ref::compare(h, sub, flushed, {}).ok);
  CHECK(ref::compare(h, sub, flushed, {}, {.flushes_f16_subnormals = true}).ok);
  CHECK_FALSE(ref::compare(h, sub, bytes_of<std::uint16_t>({0x0000, 0x3c00}), {}, {true}).ok);  // sign kept
  CHECK_FALSE(ref::compare(h, sub, bytes_of<std::uint16_t>({0x8001}), {}).ok);                   // length
}
