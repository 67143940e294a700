#include "conformance/derivation_cases.hpp"

#include "conformance/conformance.hpp"

#include <reference/reference.hpp>

#include <ballast/dtype.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace conformance {
namespace {

using ballast::DataType;
using ballast::Derivation;
using ballast::ZeroPoints;

template <class T>
void put(std::vector<std::byte>& v, std::uint64_t index, T value) {
  std::memcpy(v.data() + index * sizeof(T), &value, sizeof(T));
}

std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::string shape_label(std::uint64_t rows, std::uint64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// f32 values that stress conversion to f16: exact ties, both overflow
// sides of 65520, every flavour of NaN, subnormal results and their ties.
const std::vector<float>& f32_specials() {
  static const std::vector<float> v = {
      0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      from_bits(0x7fc00000u), from_bits(0xffc00000u), from_bits(0x7f800001u), from_bits(0x7fbfffffu),
      from_bits(0xffc12345u), 65504.0f, -65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e10f, -3.0e38f,
      std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), 1e-40f, -1e-42f,
      std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(3.0f, -26), std::ldexp(1.0f, -26),
      -std::ldexp(5.0f, -26), std::ldexp(1.0f, -14), std::ldexp(1023.0f, -24), std::ldexp(2047.0f, -25),
      1.0f + std::ldexp(1.0f, -11), 1.0f + std::ldexp(3.0f, -11), -(1.0f + std::ldexp(1.0f, -11)),
      2048.0f + 1.0f, 2048.0f + 3.0f, 0.1f, -0.3333333f, 6.1035156e-05f, 6.097555e-05f};
  return v;
}

const std::vector<std::uint16_t>& half_specials() {  // f16 or bf16 patterns
  static const std::vector<std::uint16_t> v = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7f80,
                                               0xff80, 0x7fc0, 0x7f81, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff,
                                               0xfbff, 0x477f, 0x4780, 0x47ff, 0x3380, 0x3300, 0x3f80};
  return v;
}

// A float from one 64-bit draw: random sign and mantissa, exponent mostly
// within f16's normal range, sometimes in its subnormal range or beyond
// its largest value, and (when `wild`) any bit pattern at all.
float mixed_f32(std::mt19937_64& rng, bool wild) {
  const std::uint64_t r = rng();
  const auto sign_and_mantissa = static_cast<std::uint32_t>(r) & 0x807fffffu;
  const unsigned pick = static_cast<unsigned>(r >> 32) % 16;
  if (wild && pick == 0) return from_bits(static_cast<std::uint32_t>(r >> 24));
  // f32 exponent field 127+e: f16 normals are e in [-14, 15].
  const unsigned e = wild && pick == 1 ? 127 - 26 + static_cast<unsigned>(r >> 40) % 13   // f16 subnormal range
                     : wild && pick == 2 ? 127 + 15 + static_cast<unsigned>(r >> 40) % 4  // around f16 overflow
                                         : 127 - 12 + static_cast<unsigned>(r >> 40) % 24;
  return from_bits(sign_and_mantissa | (e << 23));
}

std::uint16_t f16_of(float f) { return ballast::reference::f16_from_f32(f); }

std::span<const std::byte> rows_of(const std::vector<std::byte>& bytes, std::uint64_t total_bytes,
                                   std::uint64_t total_rows, std::uint64_t first, std::uint64_t count) {
  if (total_bytes == 0) return {};
  const std::uint64_t per_row = total_bytes / total_rows;
  return std::span<const std::byte>(bytes).subspan(first * per_row, count * per_row);
}

// Compares output rows [first, first + count) with the reference run on the
// matching source rows; every operand's size is linear in the row count.
std::string compare_rows(const DerivationCase& c, const ballast::DerivationLaunch& shape, std::uint64_t first,
                         std::uint64_t count, const ballast::DerivationSizes& sizes, const std::vector<std::byte>& dst,
                         const std::vector<std::byte>& dst2, const ballast::reference::Tolerance& tol) {
  ballast::DerivationLaunch part = shape;
  part.rows = count;
  const std::uint64_t rows = shape.rows;
  const ballast::reference::Inputs in{rows_of(c.src, sizes.src_bytes, rows, first, count),
                                      rows_of(c.scales, sizes.scales_bytes, rows, first, count),
                                      rows_of(c.zero_points, sizes.zero_point_bytes, rows, first, count)};
  auto expected = ballast::reference::derive(part, in);
  if (!expected.ok()) return "reference: " + expected.error().to_string();
  const auto cmp = ballast::reference::compare(part, *expected, rows_of(dst, sizes.dst_bytes, rows, first, count),
                                               rows_of(dst2, sizes.dst2_bytes, rows, first, count), tol);
  if (cmp.ok) return {};
  const std::string where = count == rows ? "" : " (in the band of rows from " + std::to_string(first) + ")";
  return std::to_string(cmp.mismatches) + " mismatches" + where + "; first: " + cmp.message;
}

}  // namespace

DerivationCase transpose_case(DataType element, std::uint64_t rows, std::uint64_t cols, std::uint64_t seed) {
  DerivationCase c;
  c.label = "transpose " + std::string(ballast::dtype_name(element)) + " " + shape_label(rows, cols);
  c.shape.kind = Derivation::transpose;
  c.shape.src_type = element;
  c.shape.rows = rows;
  c.shape.cols = cols;
  c.src = random_bytes(rows * cols * (ballast::dtype_bits(element) / 8), seed);
  return c;
}

DerivationCase to_f16_case(DataType source, std::uint64_t rows, std::uint64_t cols, bool special, std::uint64_t seed) {
  DerivationCase c;
  c.label = "to_f16 from " + std::string(ballast::dtype_name(source)) + " " + shape_label(rows, cols) +
            (special ? " with special values" : "");
  c.shape.kind = Derivation::to_f16;
  c.shape.src_type = source;
  c.shape.rows = rows;
  c.shape.cols = cols;
  const std::uint64_t n = rows * cols;
  std::mt19937_64 rng(seed);
  if (source == DataType::float32) {
    c.src.resize(n * 4);
    for (std::uint64_t i = 0; i < n; ++i) put(c.src, i, mixed_f32(rng, special));
    if (special) {
      const auto& s = f32_specials();
      for (std::uint64_t i = 0; i < n; i += 3) put(c.src, i, s[(i / 3) % s.size()]);
    }
  } else {
    c.src.resize(n * 2);
    for (std::uint64_t i = 0; i < n; ++i) {
      // bf16 is the top half of an f32.
      const auto bits = static_cast<std::uint16_t>(f32_bits(mixed_f32(rng, special)) >> 16);
      put(c.src, i, bits);
    }
    if (special) {
      const auto& s = half_specials();
      for (std::uint64_t i = 0; i < n; i += 3) put(c.src, i, s[(i / 3) % s.size()]);
    }
  }
  return c;
}

DerivationCase int4_case(Derivation kind, DataType scale_type, ZeroPoints zero_points, std::uint64_t n,
                         std::uint64_t k, std::uint32_t block_size, bool special, std::uint64_t seed) {
  static const char* const kZeroPointNames[] = {"no zero points", "packed zero points", "unpacked zero points"};
  DerivationCase c;
  c.label = std::string(ballast::derivation_name(kind)) + " " + std::string(ballast::dtype_name(scale_type)) +
            " scales, " + kZeroPointNames[static_cast<int>(zero_points)] + ", N=" + std::to_string(n) +
            " K=" + std::to_string(k) + " block_size=" + std::to_string(block_size) +
            (special ? " with special scales" : "");
  c.shape.kind = kind;
  c.shape.src_type = scale_type;
  c.shape.rows = n;
  c.shape.cols = k;
  c.shape.block_size = block_size;
  c.shape.zero_points = zero_points;
  auto sizes = ballast::derivation_sizes(c.shape);
  if (!sizes.ok()) return c;  // the runner reports the shape error
  std::mt19937_64 rng(seed);
  c.src = random_bytes(sizes->src_bytes, seed + 1);
  const std::uint64_t scale_count = n * ballast::k_blocks(k, block_size);
  const bool f32 = scale_type == DataType::float32;
  auto put_scale_type = [&](std::vector<std::byte>& v, std::uint64_t i, float value) {
    if (f32) {
      put(v, i, value);
    } else {
      put(v, i, f16_of(value));
    }
  };
  c.scales.resize(sizes->scales_bytes);
  for (std::uint64_t i = 0; i < scale_count; ++i) {
    std::uniform_real_distribution<float> mag(0.001f, 0.25f);
    put_scale_type(c.scales, i, ((rng() & 1) ? -1.0f : 1.0f) * mag(rng));
  }
  if (special) {
    // Scales that make (q - zp) * scale overflow f16, land in its subnormal
    // range, or carry NaN/inf/zero through.
    const float specials[] = {65504.0f, 30000.0f, 1e-7f, -6e-8f, 0.0f, -0.0f,
                              std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                              f32 ? 1e30f : 4096.0f, f32 ? 1e-30f : 1e-5f};
    for (std::uint64_t i = 0; i < scale_count; i += 2) put_scale_type(c.scales, i, specials[(i / 2) % 10]);
  }
  c.zero_points.resize(sizes->zero_point_bytes);
  if (zero_points == ZeroPoints::packed_u4) {
    c.zero_points = random_bytes(sizes->zero_point_bytes, seed + 2);
  } else if (zero_points == ZeroPoints::unpacked) {
    for (std::uint64_t i = 0; i < scale_count; ++i) put_scale_type(c.zero_points, i, static_cast<float>(rng() % 16));
  }
  return c;
}

DerivationCase quant_int8_case(DataType source, std::uint64_t rows, std::uint64_t cols, bool special,
                               std::uint64_t seed) {
  DerivationCase c;
  c.label = "quant_int8 from " + std::string(ballast::dtype_name(source)) + " " + shape_label(rows, cols) +
            (special ? " with special values" : "");
  c.shape.kind = Derivation::quant_int8;
  c.shape.src_type = source;
  c.shape.rows = rows;
  c.shape.cols = cols;
  std::mt19937_64 rng(seed);
  const bool f32 = source == DataType::float32;
  c.src.resize(rows * cols * (f32 ? 4 : 2));
  auto set = [&](std::uint64_t i, float v) {
    if (f32) {
      put(c.src, i, v);
    } else {
      put(c.src, i, f16_of(v));
    }
  };
  for (std::uint64_t r = 0; r < rows; ++r) {
    // Rows differ in magnitude so per-row scales matter; row 1 is all zero.
    const float row_scale = std::ldexp(1.0f, static_cast<int>(rng() % 16) - 8);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (std::uint64_t col = 0; col < cols; ++col) set(r * cols + col, r == 1 ? 0.0f : value(rng) * row_scale);
  }
  if (special && rows >= 6 && cols >= 4) {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float row2[] = {nan, 1.0f, -0.5f, 0.25f};      // NaN ignored for the scale, code 0
    const float row3[] = {inf, 1.0f, -inf, 0.0f};        // infinite scale
    const float row4[] = {1e-40f, -3e-41f, 0.0f, 1e-45f};  // subnormal f32 (zero in f16)
    const float row5[] = {-0.0f, 0.0f, -0.0f, 0.0f};
    const float* rows_[] = {row2, row3, row4, row5};
    for (int r = 0; r < 4; ++r)
      for (std::uint64_t col = 0; col < cols; ++col) set((r + 2) * cols + col, rows_[r][col % 4]);
    // Exact ties of w / scale at +-x.5 when the row max is 127.
    for (std::uint64_t col = 0; col < cols; ++col) set(0 * cols + col, col == 0 ? 127.0f : static_cast<float>(col % 255) * 0.5f - 63.5f);
  }
  if (special && rows >= 8 && cols >= 10) {
    // Row 6: the max |w| = 127 is negative, the scale is 1, and w / scale
    // runs through ties x.5 with x even and odd on both sides of zero.
    for (std::uint64_t col = 0; col < cols; ++col)
      set(6 * cols + col, col == 0 ? -127.0f : static_cast<float>(col % 20) - 9.5f);  // -9.5 .. 9.5
    // Row 7: the largest magnitude is a negative subnormal (190 units of
    // 2^-149; zero in f16), so the scale rounds down to one unit and w / scale
    // goes past -127.5 and +127.5: the clamp to [-127, 127] decides, from both sides.
    const int units[] = {-190, 189, -128, 128, -127, 127, -126, 1, -1, 0};
    for (std::uint64_t col = 0; col < cols; ++col) {
      const int u = units[col % 10];
      const std::uint32_t bits = static_cast<std::uint32_t>(u < 0 ? -u : u) | (u < 0 ? 0x80000000u : 0u);
      float v;
      std::memcpy(&v, &bits, 4);
      set(7 * cols + col, v);
    }
  }
  return c;
}

std::string run_derivation_case(const DerivationCase& c) {
  auto& g = gpu();
  auto sizes = ballast::derivation_sizes(c.shape);
  if (!sizes.ok()) return "shape: " + sizes.error().to_string();

  // Owns what this run allocated; frees it whatever happens.
  struct Owned {
    std::vector<DevicePtr> ptrs;
    std::string error;
    ~Owned() {
      for (auto p : ptrs) static_cast<void>(gpu().free(p));
    }
    DevicePtr take(std::uint64_t bytes) {
      auto p = gpu().allocate(bytes, 256);
      if (!p.ok()) {
        error = "allocate " + std::to_string(bytes) + ": " + p.error().to_string();
        return 0;
      }
      ptrs.push_back(*p);
      return *p;
    }
  } owned;

  ballast::DerivationLaunch l = c.shape;
  auto place = [&](const std::vector<std::byte>& host, std::uint64_t needed) -> DevicePtr {
    if (needed == 0) return 0;
    const DevicePtr p = owned.take(needed);
    if (p == 0) return 0;
    auto s = g.copy_to_device(p, 0, std::span<const std::byte>(host.data(), needed));
    if (!s.ok()) owned.error = "upload: " + s.to_string();
    return p;
  };
  l.src = place(c.src, sizes->src_bytes);
  l.scales = place(c.scales, sizes->scales_bytes);
  l.zero_point = place(c.zero_points, sizes->zero_point_bytes);
  l.dst = owned.take(sizes->dst_bytes);
  if (sizes->dst2_bytes > 0) l.dst2 = owned.take(sizes->dst2_bytes);
  if (!owned.error.empty()) return owned.error;

  if (auto s = g.launch(l); !s.ok()) return "launch: " + s.to_string();
  if (auto s = g.synchronize(); !s.ok()) return "synchronize: " + s.to_string();

  std::vector<std::byte> dst(sizes->dst_bytes), dst2(sizes->dst2_bytes);
  if (auto s = g.copy_to_host(dst, l.dst, 0); !s.ok()) return "download dst: " + s.to_string();
  if (!dst2.empty()) {
    if (auto s = g.copy_to_host(dst2, l.dst2, 0); !s.ok()) return "download dst2: " + s.to_string();
  }

  ballast::reference::Tolerance tol;
  tol.flushes_f16_subnormals = g.capabilities().flushes_f16_subnormals;
  tol.int8_codes_within_one = g.capabilities().int8_codes_within_one;
  const bool banded = c.verify_row_bands > 0 && c.shape.kind != Derivation::transpose &&
                      3 * c.verify_row_bands < c.shape.rows;
  if (!banded) return compare_rows(c, c.shape, 0, c.shape.rows, *sizes, dst, dst2, tol);
  const std::uint64_t band = c.verify_row_bands;
  for (std::uint64_t first : {std::uint64_t{0}, c.shape.rows / 2 - band / 2, c.shape.rows - band}) {
    std::string failure = compare_rows(c, c.shape, first, band, *sizes, dst, dst2, tol);
    if (!failure.empty()) return failure;
  }
  return {};
}

}  // namespace conformance
