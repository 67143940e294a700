// Per-block lookups shared by the portable and vectorised int4 kernels.
#pragma once

#include "kernels.hpp"

#include <common/kernel_math.hpp>

#include <cstring>

namespace ballast::cpu {

inline float int4_scale(const Int4Args& a, std::uint64_t n, std::uint64_t block) {
  const std::uint64_t i = n * a.k_blocks + block;
  return a.f16_scales ? kmath::f32_from_f16_bits(static_cast<const std::uint16_t*>(a.scales)[i])
                      : static_cast<const float*>(a.scales)[i];
}

inline float int4_zero_point(const Int4Args& a, std::uint64_t n, std::uint64_t block) {
  switch (a.zero_point_form) {
    case ZeroPoints::absent: return kmath::kDefaultZeroPoint;
    case ZeroPoints::packed_u4:
      return kmath::zero_point_packed(static_cast<const std::uint8_t*>(a.zero_points), a.k_blocks, n, block);
    case ZeroPoints::unpacked:
      return a.f16_scales
                 ? kmath::zero_point_f16(static_cast<const std::uint16_t*>(a.zero_points), a.k_blocks, n, block)
                 : kmath::zero_point_f32(static_cast<const float*>(a.zero_points), a.k_blocks, n, block);
  }
  return kmath::kDefaultZeroPoint;
}

// Pair `block` of row n's pairs (see Int4Args::pairs: 2-byte aligned).
inline void store_pair(std::uint8_t* row_pairs, std::uint64_t block, std::uint32_t pair) {
  std::memcpy(row_pairs + 4 * block, &pair, 4);
}

// Bytes of B per row.
inline std::uint64_t int4_row_bytes(const Int4Args& a) { return a.k_blocks * (a.block_size / 2); }

// The last word of a row when K is not a multiple of 8: real codes, then
// the block's zero point in the padding columns.
inline std::uint32_t int4_partial_word(const Int4Args& a, std::uint64_t n, std::uint64_t j) {
  const std::uint8_t* row = a.b + n * int4_row_bytes(a);
  const std::uint32_t pad = kmath::zero_point_code(int4_zero_point(a, n, (8 * j) / a.block_size));
  std::uint32_t codes[8];
  for (std::uint32_t c = 0; c < 8; ++c) {
    const std::uint64_t col = 8 * j + c;
    codes[c] = col < a.k ? kmath::int4_code(row, col) : pad;
  }
  return kmath::repack_word(codes);
}

// Four bytes of B (columns 8j..8j+7, nibble p of the little-endian word is
// column p) to the repacked word: even columns to nibbles 0..3, odd ones to
// 4..7. Integer ops only, so loops over it auto-vectorise.
inline std::uint32_t int4_repack_bytes(std::uint32_t v) {
  std::uint32_t even = v & 0x0f0f0f0fu;
  std::uint32_t odd = (v >> 4) & 0x0f0f0f0fu;
  even = (even | (even >> 4)) & 0x00ff00ffu;
  odd = (odd | (odd >> 4)) & 0x00ff00ffu;
  even = (even | (even >> 8)) & 0x0000ffffu;
  odd = (odd | (odd >> 8)) & 0x0000ffffu;
  return even | (odd << 16);
}

}  // namespace ballast::cpu
