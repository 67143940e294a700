// The per-element arithmetic of every derivation (docs/derivations.md), in one
// place so that the CPU, CUDA, HIP and (ported to GLSL) Vulkan kernels agree
// bit for bit. Everything here is integer logic or a single IEEE f32
// add/sub/mul/div, which every target performs identically under
// round-to-nearest-even; no libm, no std:: calls, no rounding-mode tricks
// (`x + 2^23 - 2^23` breaks under fast-math or reassociation, and rintf is
// not available everywhere), so results do not depend on the compiler.
//
// Function names are part of the contract with the GPU backends: keep them.
// HIP sources include <hip/hip_runtime.h> first (it declares the device
// memcpy used by the bit casts); CUDA declares it implicitly.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define BALLAST_HD __host__ __device__
#else
#define BALLAST_HD
#endif

namespace ballast::kmath {

// ---------------------------------------------------------------- bit casts
// memcpy is the one bit cast that is defined behaviour in C++ and supported
// in CUDA and HIP device code; compilers lower it to a register move.
BALLAST_HD inline std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

BALLAST_HD inline float f32_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// ------------------------------------------------------ float conversions
// f32 -> f16 bits, round to nearest even. Overflow (|x| >= 65520, the
// midpoint between 65504 and 2^16) gives +-inf; subnormal results are exact
// (never flushed); NaN stays NaN: quiet bit set, top 9 payload bits kept,
// sign kept (what x86 F16C and ARM FCVT produce too).
BALLAST_HD inline std::uint16_t f16_bits_from_f32(float f) {
  const std::uint32_t x = f32_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520
  if (ax >= 0x38800000u) {  // >= 2^-14: a normal f16
    // Rebias the exponent (127 -> 15) in place, then round the 23-bit
    // mantissa to 10 bits; a carry out of the mantissa bumps the exponent,
    // which is exactly right (and cannot reach inf below 65520).
    const std::uint32_t m = ax - (112u << 23);
    return static_cast<std::uint16_t>(sign | ((m + 0xfffu + ((m >> 13) & 1u)) >> 13));
  }
  // Below 2^-14: a multiple of the f16 subnormal unit 2^-24, or zero.
  // value = significand * 2^(e - 150) = significand * 2^-24 * 2^-(126 - e).
  const std::uint32_t e = ax >> 23;
  const std::uint32_t shift = 126u - e;        // >= 14 here
  if (shift > 24u) return static_cast<std::uint16_t>(sign);  // < 2^-25: rounds to zero
  const std::uint32_t significand = (ax & 0x7fffffu) | 0x800000u;
  std::uint32_t q = significand >> shift;
  const std::uint32_t rem = significand & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may become 0x400, the smallest normal: correct
  return static_cast<std::uint16_t>(sign | q);
}

// f16 bits -> f32, exact (every f16 is an f32); a NaN stays NaN with its
// payload, quietened (as F16C does).
BALLAST_HD inline float f32_from_f16_bits(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return f32_from_bits(sign | 0x7f800000u | (m << 13) | (m != 0u ? 0x400000u : 0u));
  if (e != 0u) return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0u) return f32_from_bits(sign);
  // Subnormal: normalise so the leading 1 becomes the implicit bit.
  e = 113u;
  while ((m & 0x400u) == 0u) {
    m <<= 1;
    --e;
  }
  return f32_from_bits(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

// bf16 is the top half of an f32.
BALLAST_HD inline float f32_from_bf16_bits(std::uint16_t b) {
  return f32_from_bits(static_cast<std::uint32_t>(b) << 16);
}

BALLAST_HD inline std::uint16_t f16_bits_from_bf16_bits(std::uint16_t b) {
  return f16_bits_from_f32(f32_from_bf16_bits(b));
}

// ---------------------------------------------------------------- rounding
// Nearest integer, ties to even, by integer logic on the bits. Valid for
// |x| < 2^31 (callers clamp first); NaN must be handled by the caller.
BALLAST_HD inline std::int32_t round_half_even(float f) {
  const std::uint32_t x = f32_bits(f);
  const std::uint32_t ax = x & 0x7fffffffu;
  const std::uint32_t e = ax >> 23;
  std::uint32_t magnitude;
  if (e < 126u) {  // |x| < 0.5
    magnitude = 0u;
  } else if (e >= 150u) {  // |x| >= 2^23: already an integer
    magnitude = ((ax & 0x7fffffu) | 0x800000u) << (e - 150u);
  } else {
    const std::uint32_t significand = (ax & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 150u - e;  // 1..24
    magnitude = significand >> shift;
    const std::uint32_t rem = significand & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (magnitude & 1u))) ++magnitude;
  }
  const auto m = static_cast<std::int32_t>(magnitude);
  return (x >> 31) ? -m : m;
}

BALLAST_HD inline bool is_nan(float f) { return (f32_bits(f) & 0x7fffffffu) > 0x7f800000u; }

BALLAST_HD inline float abs_f32(float f) { return f32_from_bits(f32_bits(f) & 0x7fffffffu); }

// ------------------------------------------------------------------- int4
// MatMulNBits bits=4: B is uint8 [N, k_blocks, block_size/2]; column k of a
// row lives in byte k/2 of the row's bytes, low nibble for even k.
BALLAST_HD inline std::uint32_t int4_code(const std::uint8_t* row, std::uint64_t k) {
  const std::uint32_t byte = row[k >> 1];
  return (k & 1u) ? (byte >> 4) : (byte & 0xfu);
}

inline constexpr float kDefaultZeroPoint = 8.0f;  // zero_points absent

// Packed u4 zero points: uint8 [N, ceil(k_blocks/2)], low nibble first.
BALLAST_HD inline float zero_point_packed(const std::uint8_t* zero_points, std::uint64_t k_blocks, std::uint64_t n,
                                          std::uint64_t block) {
  const std::uint8_t* row = zero_points + n * ((k_blocks + 1u) / 2u);
  return static_cast<float>(int4_code(row, block));
}

// Unpacked zero points share the scales' type: [N, k_blocks] f32 or f16.
BALLAST_HD inline float zero_point_f32(const float* zero_points, std::uint64_t k_blocks, std::uint64_t n,
                                       std::uint64_t block) {
  return zero_points[n * k_blocks + block];
}

BALLAST_HD inline float zero_point_f16(const std::uint16_t* zero_points, std::uint64_t k_blocks, std::uint64_t n,
                                       std::uint64_t block) {
  return f32_from_f16_bits(zero_points[n * k_blocks + block]);
}

// The dequantised value: (q - zp) * scale in f32 (two IEEE operations, never
// fused: a subtraction feeding a multiplication is not contractible), then
// one RNE rounding to f16.
BALLAST_HD inline float dequant_f32(std::uint32_t q, float zero_point, float scale) {
  return (static_cast<float>(q) - zero_point) * scale;
}

BALLAST_HD inline std::uint16_t dequant_f16_bits(std::uint32_t q, float zero_point, float scale) {
  return f16_bits_from_f32(dequant_f32(q, zero_point, scale));
}

// repack_int4 word layout: nibble i (bits 4i..4i+3) of word (n, j) holds
// column 8j + repack_column_of_nibble(i); the order is 0,2,4,6,1,3,5,7 so a
// GEMV can split a word into even and odd columns with one shift and mask.
inline constexpr std::uint32_t kRepackNibbleOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

BALLAST_HD inline std::uint32_t repack_column_of_nibble(std::uint32_t i) { return ((i & 3u) << 1) | (i >> 2); }

// The inverse: which nibble of its word column c (0..7 within the word) lands in.
BALLAST_HD inline std::uint32_t repack_nibble_of_column(std::uint32_t c) { return (c >> 1) | ((c & 1u) << 2); }

// codes[c] is the code of column 8j + c (c = 0..7; pad with the zero-point code).
BALLAST_HD inline std::uint32_t repack_word(const std::uint32_t codes[8]) {
  std::uint32_t word = 0;
  for (std::uint32_t c = 0; c < 8u; ++c) word |= (codes[c] & 0xfu) << (4u * repack_nibble_of_column(c));
  return word;
}

// The code padding columns past K hold: the block's zero point as a nibble.
// Packed/absent zero points are already codes; a float zero point (unpacked
// form) is rounded half-even and clamped to 0..15, NaN gives 8.
BALLAST_HD inline std::uint32_t zero_point_code(float zero_point) {
  if (is_nan(zero_point)) return 8u;
  if (!(zero_point > 0.0f)) return 0u;
  if (zero_point >= 15.0f) return 15u;
  return static_cast<std::uint32_t>(round_half_even(zero_point));
}

// The scale/offset pair of one block: (scale, -scale*zp), each computed in
// f32 and rounded once to f16; packed little-endian into one u32 (scale in
// the low half, i.e. first in memory).
BALLAST_HD inline std::uint32_t repack_scale_pair(float scale, float zero_point) {
  const std::uint32_t s = f16_bits_from_f32(scale);
  const std::uint32_t o = f16_bits_from_f32(-(scale * zero_point));
  return s | (o << 16);
}

// ------------------------------------------------------------------- int8
// Running max of |w|, ignoring NaN (a NaN never compares greater).
BALLAST_HD inline float abs_max_step(float running, float w) {
  const float a = abs_f32(w);
  return a > running ? a : running;
}

// scale = max|w| * (1/127), the constant rounded to f32 first; one multiply.
inline constexpr float kInvInt8Max = 1.0f / 127.0f;

BALLAST_HD inline float quant_int8_scale(float max_abs) { return max_abs * kInvInt8Max; }

// quant_int8_given_max's row maximum from the value given: its magnitude,
// a NaN taken as 0 (as the maximum of a row ignores NaNs), so any f32
// given gives one defined scale on every backend.
BALLAST_HD inline float given_row_max(float given) {
  const float a = abs_f32(given);
  return is_nan(a) ? 0.0f : a;
}

// code = clamp(round_half_even(w / scale), -127, 127). A zero scale (all-zero
// row, or a max so small that scale underflowed) gives 0, as does NaN;
// +-inf clamps to +-127.
BALLAST_HD inline std::int8_t quant_int8_code(float w, float scale) {
  if (scale == 0.0f) return 0;
  float r = w / scale;
  if (is_nan(r)) return 0;
  if (r > 127.0f) r = 127.0f;
  if (r < -127.0f) r = -127.0f;
  return static_cast<std::int8_t>(round_half_even(r));
}

}  // namespace ballast::kmath
