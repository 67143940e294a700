// The per-thread arithmetic of the GPU derivation kernels that is not plain
// kernel_math: fetching int4 scales and zero points in each of their forms
// and turning one 32-bit group of eight codes into outputs. Kept free of
// vendor names so tests/unit/gpu runs exactly this code on the CPU against
// the scalar reference.
#pragma once

#include "gpu/kernel_args.hpp"
#include "kernel_math.hpp"

#include <cstdint>

namespace ballast::gpu::elem {

// Eight int4 codes of consecutive columns 8j..8j+7 of one row, as stored in
// MatMulNBits B (byte b: low nibble column 2b, high nibble 2b+1), read as a
// little-endian word: nibble c is then column 8j+c. Byte-wise, so any
// alignment works; kernels use a word load when the address allows.
BALLAST_HD inline std::uint32_t load_u32_le(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

BALLAST_HD inline std::uint32_t nibble(std::uint32_t codes, std::uint32_t c) { return (codes >> (4u * c)) & 0xfu; }

BALLAST_HD inline std::uint64_t int4_k_blocks(std::uint64_t k, std::uint32_t block_size) {
  return (k + block_size - 1u) / block_size;
}

// Bytes of one row of B: k_blocks blocks of block_size/2 bytes.
BALLAST_HD inline std::uint64_t int4_row_bytes(std::uint64_t k_blocks, std::uint32_t block_size) {
  return k_blocks * (block_size / 2u);
}

BALLAST_HD inline float int4_scale(const void* scales, KernelType type, std::uint64_t index) {
  if (type == KernelType::float16) return kmath::f32_from_f16_bits(static_cast<const std::uint16_t*>(scales)[index]);
  return static_cast<const float*>(scales)[index];
}

// The zero point of block `block` of row `n` as a float, in any of its forms.
BALLAST_HD inline float int4_zero_point(KernelZeroPoints form, const void* zero_points, KernelType scale_type,
                                        std::uint64_t k_blocks, std::uint64_t n, std::uint64_t block) {
  switch (form) {
    case KernelZeroPoints::packed_u4:
      return kmath::zero_point_packed(static_cast<const std::uint8_t*>(zero_points), k_blocks, n, block);
    case KernelZeroPoints::unpacked:
      if (scale_type == KernelType::float16)
        return kmath::zero_point_f16(static_cast<const std::uint16_t*>(zero_points), k_blocks, n, block);
      return kmath::zero_point_f32(static_cast<const float*>(zero_points), k_blocks, n, block);
    case KernelZeroPoints::absent:
      break;
  }
  return kmath::kDefaultZeroPoint;
}

// dequant_int4 of one group: out[c] is the f16 of column 8j+c.
BALLAST_HD inline void dequant_group(std::uint32_t codes, float zero_point, float scale, std::uint16_t out[8]) {
  for (std::uint32_t c = 0; c < 8u; ++c) out[c] = kmath::dequant_f16_bits(nibble(codes, c), zero_point, scale);
}

// repack_int4 of one group: columns at or past `valid` (K - 8j, when the
// group runs past K) hold the block's zero-point code instead of B's bytes.
BALLAST_HD inline std::uint32_t repack_group(std::uint32_t codes, std::uint64_t valid, float zero_point) {
  const std::uint32_t pad = kmath::zero_point_code(zero_point);
  std::uint32_t column_codes[8];
  for (std::uint32_t c = 0; c < 8u; ++c) column_codes[c] = c < valid ? nibble(codes, c) : pad;
  return kmath::repack_word(column_codes);
}

BALLAST_HD inline float quant_source(const void* src, KernelType type, std::uint64_t index) {
  if (type == KernelType::float16) return kmath::f32_from_f16_bits(static_cast<const std::uint16_t*>(src)[index]);
  return static_cast<const float*>(src)[index];
}

BALLAST_HD inline std::uint16_t to_f16_element(const void* src, KernelType type, std::uint64_t index) {
  if (type == KernelType::bfloat16) return kmath::f16_bits_from_bf16_bits(static_cast<const std::uint16_t*>(src)[index]);
  return kmath::f16_bits_from_f32(static_cast<const float*>(src)[index]);
}

}  // namespace ballast::gpu::elem
