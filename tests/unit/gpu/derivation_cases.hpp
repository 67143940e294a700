// Shapes and deterministic pseudo-random inputs covering every derivation,
// source type and zero-point form, with odd sizes, K not a multiple of the
// block size and special float values.
#pragma once

#include "reference/reference.hpp"

#include <ballast/derivation.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace ballast::gpu::testing {

struct Case {
  DerivationLaunch shape;  // pointers unset
  std::vector<std::byte> src, scales, zero_points;
  std::string name;
};

inline std::vector<std::byte> random_bytes(std::mt19937& rng, std::uint64_t n) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  return out;
}

// f32 values: mostly ordinary magnitudes, with zeros, subnormals, f16
// overflow, infinities and NaNs mixed in.
inline std::vector<std::byte> random_f32(std::mt19937& rng, std::uint64_t count, float lo, float hi, bool specials) {
  std::uniform_real_distribution<float> value(lo, hi);
  static const float kSpecial[] = {0.0f, -0.0f, 1e-40f, -3e-8f, 65519.0f, 65520.0f, -1e9f, 5.9604645e-8f,
                                   std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  std::vector<std::byte> out(count * 4);
  for (std::uint64_t i = 0; i < count; ++i) {
    float f = value(rng);
    if (specials && rng() % 13 == 0) f = kSpecial[rng() % std::size(kSpecial)];
    std::memcpy(out.data() + 4 * i, &f, 4);
  }
  return out;
}

// f16 bit patterns of finite values in roughly [-2^(e), 2^(e)].
inline std::vector<std::byte> random_f16(std::mt19937& rng, std::uint64_t count, unsigned max_exponent) {
  std::vector<std::byte> out(count * 2);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint16_t sign = (rng() & 1) << 15;
    const std::uint16_t exponent = static_cast<std::uint16_t>(rng() % (max_exponent + 1));
    const std::uint16_t bits = sign | static_cast<std::uint16_t>(exponent << 10) | (rng() & 0x3ff);
    std::memcpy(out.data() + 2 * i, &bits, 2);
  }
  return out;
}

inline std::vector<Case> derivation_cases() {
  std::mt19937 rng(20261129);
  std::vector<Case> cases;
  // Small odd shapes (edge paths), and shapes with full 16-byte-aligned
  // tiles, slabs and chunks for the kernels' fast paths (with partial tiles
  // around them: 136 and 200 are multiples of 8 but not of the tiles).
  const std::pair<std::uint64_t, std::uint64_t> dims[] = {{1, 1},     {3, 5},     {17, 33},  {64, 40},
                                                          {7, 129},   {128, 256}, {136, 200}, {144, 272}, {2, 4112},
                                                          {5, 8192 + 32}};
  for (auto [r, c] : dims) {
    for (DataType t : {DataType::uint8, DataType::float16, DataType::float32, DataType::int64}) {
      if (r * c > 64 * 1024) continue;  // the long rows are for quant_int8
      Case k;
      k.shape.kind = Derivation::transpose;
      k.shape.src_type = t;
      k.shape.rows = r;
      k.shape.cols = c;
      k.src = random_bytes(rng, r * c * (t == DataType::uint8 ? 1 : t == DataType::float16 ? 2 : t == DataType::float32 ? 4 : 8));
      k.name = "transpose " + std::to_string(r) + "x" + std::to_string(c);
      cases.push_back(std::move(k));
    }
    for (DataType t : {DataType::float32, DataType::bfloat16}) {
      Case k;
      k.shape.kind = Derivation::to_f16;
      k.shape.src_type = t;
      k.shape.rows = r;
      k.shape.cols = c;
      k.src = t == DataType::float32 ? random_f32(rng, r * c, -70000.0f, 70000.0f, true) : random_bytes(rng, r * c * 2);
      k.name = "to_f16 " + std::to_string(r) + "x" + std::to_string(c);
      cases.push_back(std::move(k));
    }
    for (DataType t : {DataType::float32, DataType::float16}) {
      Case k;
      k.shape.kind = Derivation::quant_int8;
      k.shape.src_type = t;
      k.shape.rows = r;
      k.shape.cols = c;
      k.src = t == DataType::float32 ? random_f32(rng, r * c, -3.0f, 3.0f, false) : random_f16(rng, r * c, 20);
      if (r == 3) std::fill(k.src.begin(), k.src.begin() + static_cast<std::ptrdiff_t>(c * (t == DataType::float32 ? 4 : 2)), std::byte{0});
      k.name = "quant_int8 " + std::to_string(r) + "x" + std::to_string(c);
      cases.push_back(std::move(k));
    }
  }
  // quant_int8 rows whose quotients lie on half-integers (max 127, so the
  // scale is ~1): the kernels' reciprocal path must fall back to the exact
  // division there.
  for (std::uint64_t cols : {std::uint64_t{1040}, std::uint64_t{4128}}) {
    Case k;
    k.shape.kind = Derivation::quant_int8;
    k.shape.src_type = DataType::float32;
    k.shape.rows = 3;
    k.shape.cols = cols;
    std::vector<float> values(3 * cols);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = i % cols == 5 ? 127.0f : static_cast<float>(static_cast<int>(i % 254) - 127) + 0.5f;
    k.src.resize(values.size() * 4);
    std::memcpy(k.src.data(), values.data(), k.src.size());
    k.name = "quant_int8 half-integers 3x" + std::to_string(cols);
    cases.push_back(std::move(k));
  }
  // int4: N x K with block sizes where K is and is not a multiple.
  const struct { std::uint64_t n, k; std::uint32_t bs; } int4_dims[] = {
      {1, 1, 16},  {2, 16, 16},  {3, 37, 16},  {5, 100, 32}, {4, 200, 64},
      {2, 300, 128}, {3, 256, 16}, {4, 512, 32}, {3, 448, 128}, {2, 264, 64}, {3, 96, 32}};
  for (auto d : int4_dims) {
    for (Derivation kind : {Derivation::dequant_int4, Derivation::repack_int4}) {
      for (DataType scale_type : {DataType::float32, DataType::float16}) {
        for (ZeroPoints zp : {ZeroPoints::absent, ZeroPoints::packed_u4, ZeroPoints::unpacked}) {
          Case k;
          k.shape.kind = kind;
          k.shape.src_type = scale_type;
          k.shape.rows = d.n;
          k.shape.cols = d.k;
          k.shape.block_size = d.bs;
          k.shape.zero_points = zp;
          const std::uint64_t kb = k_blocks(d.k, d.bs);
          k.src = random_bytes(rng, d.n * kb * d.bs / 2);
          k.scales = scale_type == DataType::float32 ? random_f32(rng, d.n * kb, -0.5f, 0.5f, false) : random_f16(rng, d.n * kb, 14);
          if (zp == ZeroPoints::packed_u4) k.zero_points = random_bytes(rng, d.n * ((kb + 1) / 2));
          if (zp == ZeroPoints::unpacked) {
            // Integer and half-integer zero points, some outside 0..15 (padding codes clamp).
            std::vector<float> values(d.n * kb);
            for (auto& v : values) v = static_cast<float>(static_cast<int>(rng() % 38) - 2) * 0.5f;
            if (scale_type == DataType::float32) {
              k.zero_points.resize(values.size() * 4);
              std::memcpy(k.zero_points.data(), values.data(), k.zero_points.size());
            } else {
              k.zero_points.resize(values.size() * 2);
              for (std::size_t i = 0; i < values.size(); ++i) {
                const std::uint16_t bits = reference::f16_from_f32(values[i]);  // exact: halves of small integers
                std::memcpy(k.zero_points.data() + 2 * i, &bits, 2);
              }
            }
          }
          k.name = std::string(derivation_name(kind)) + " " + std::to_string(d.n) + "x" + std::to_string(d.k) + " bs" +
                   std::to_string(d.bs) + " zp" + std::to_string(static_cast<int>(zp)) + " scales " +
                   (scale_type == DataType::float32 ? "f32" : "f16");
          cases.push_back(std::move(k));
        }
      }
    }
  }
  return cases;
}

}  // namespace ballast::gpu::testing
