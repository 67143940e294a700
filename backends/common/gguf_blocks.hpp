// The per-element arithmetic of the dequant_gguf kinds: the value of element
// i of one GGUF block, as f32, for every type in kinds::kGgufBlocks. Once
// here for the CPU, CUDA and HIP kernels (the Vulkan shader is a port of
// these functions, shaders/gguf_common.glsl). docs/derivations.md has each
// layout and formula.
//
// Every value is one to four IEEE f32 operations on exactly representable
// integers and f16 scales (Q4_K: d*sc, dmin*mn, then *q and -), evaluated
// in the order the formula gives (the scale products first, then the code;
// a multiply feeding an add is never fused: the CPU kernels build with
// -ffp-contract=off, the GPU kernels use explicitly rounded intrinsics), so
// every backend gives the same bits.
// Blocks are read byte by byte, little-endian: a block of 18, 22 or 34 bytes
// sits at any 2-byte boundary, so no wider access is assumed, except by
// k_group when its caller states the block's alignment.
#pragma once

#include <common/kernel_math.hpp>

#include <cstdint>

namespace ballast::kmath::gguf {

// ggml's type ids, as DataType numbers them (2000 + id; the plain floats
// keep their ONNX numbers). Plain integers so device code needs no
// ballast header.
enum Type : std::uint32_t {
  kF32 = 1,
  kF16 = 10,
  kBF16 = 16,
  kQ4_0 = 2002,
  kQ4_1 = 2003,
  kQ5_0 = 2006,
  kQ5_1 = 2007,
  kQ8_0 = 2008,
  kQ2_K = 2010,
  kQ3_K = 2011,
  kQ4_K = 2012,
  kQ5_K = 2013,
  kQ6_K = 2014,
  kQ8_K = 2015,
};

BALLAST_HD inline std::uint32_t u16_at(const std::uint8_t* p, std::uint32_t at) {
  return static_cast<std::uint32_t>(p[at]) | (static_cast<std::uint32_t>(p[at + 1]) << 8);
}

BALLAST_HD inline std::uint32_t u32_at(const std::uint8_t* p, std::uint32_t at) {
  return u16_at(p, at) | (u16_at(p, at + 2) << 16);
}

// On the GPU the hardware conversion (cvt.f32.f16 / v_cvt_f32_f16): exact,
// as the integer one is, for every f16 but NaN payloads (which the GPU's
// multiplies do not keep either), and one instruction the compiler can
// share between a thread's elements; kernel_math's branchy integer
// conversion, inlined once per element, tripled the CUDA kernels'
// instructions per 16 bytes (tools/kernel-report probes).
BALLAST_HD inline float f16_at(const std::uint8_t* p, std::uint32_t at) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(u16_at(p, at))));
#else
  return f32_from_f16_bits(static_cast<std::uint16_t>(u16_at(p, at)));
#endif
}

// An f32 product and sum whose rounding no compiler may merge (a plain
// `a * b + c` could become an FMA where contraction is on).
BALLAST_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

BALLAST_HD inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

BALLAST_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// Element i of a 32-element block's 4-bit codes at byte `at`: elements
// 0..15 are the low nibbles of bytes 0..15, elements 16..31 the high ones.
BALLAST_HD inline std::uint32_t low_high_code(const std::uint8_t* b, std::uint32_t at, std::uint32_t i) {
  return i < 16u ? (b[at + i] & 15u) : (b[at + i - 16u] >> 4);
}

// Q4_K / Q5_K: the 6-bit (scale, min) of sub-block sb (0..7) from the 12
// bytes at `at`: sub-blocks 0..3 in the low six bits of bytes 0..3 / 4..7,
// 4..7 split between the nibbles of bytes 8..11 and the top two bits of
// bytes 0..3 / 4..7.
BALLAST_HD inline std::uint32_t k_scale(const std::uint8_t* b, std::uint32_t at, std::uint32_t sb) {
  if (sb < 4u) return b[at + sb] & 63u;
  return (b[at + sb + 4u] & 15u) | ((b[at + sb - 4u] >> 6) << 4);
}

BALLAST_HD inline std::uint32_t k_min(const std::uint8_t* b, std::uint32_t at, std::uint32_t sb) {
  if (sb < 4u) return b[at + sb + 4u] & 63u;
  return (b[at + sb + 4u] >> 4) | ((b[at + sb] >> 6) << 4);
}

// Q4_K / Q5_K: the low four bits of element i (0..255) from the 128 bytes
// at `at`: each 64 elements take 32 bytes, low nibbles first.
BALLAST_HD inline std::uint32_t k_code4(const std::uint8_t* b, std::uint32_t at, std::uint32_t i) {
  const std::uint32_t byte = b[at + (i >> 6) * 32u + (i & 31u)];
  return (i & 32u) ? (byte >> 4) : (byte & 15u);
}

// Q2_K / Q3_K: the two-bit code of element i (0..255) from the 64 bytes at
// `at`: element 128h + 32j + 16g + l is bits 2j..2j+1 of byte 32h + 16g + l.
BALLAST_HD inline std::uint32_t k_code2(const std::uint8_t* b, std::uint32_t at, std::uint32_t i) {
  const std::uint32_t h = i >> 7, j = (i >> 5) & 3u, gl = i & 31u;
  return (b[at + 32u * h + gl] >> (2u * j)) & 3u;
}

// Q3_K: the signed 6-bit scale of sub-block k (0..15) from the 12 bytes at
// `at`: low four bits in the nibbles of bytes 0..7, high two in bytes 8..11.
BALLAST_HD inline std::int32_t q3k_scale(const std::uint8_t* b, std::uint32_t at, std::uint32_t k) {
  const std::uint32_t low4 = k < 8u ? (b[at + k] & 15u) : (b[at + k - 8u] >> 4);
  const std::uint32_t high2 = (b[at + 8u + (k & 3u)] >> (2u * (k >> 2))) & 3u;
  return static_cast<std::int32_t>(low4 | (high2 << 4)) - 32;
}

// The value of element i of the block at `b`, as f32.
BALLAST_HD inline float block_value(std::uint32_t type, const std::uint8_t* b, std::uint32_t i) {
  switch (type) {
    case kF32: return f32_from_bits(u32_at(b, 4u * i));
    case kF16: return f16_at(b, 2u * i);
    case kBF16: return f32_from_bf16_bits(static_cast<std::uint16_t>(u16_at(b, 2u * i)));
    case kQ4_0:  // d f16, 16 bytes of codes; (q - 8) * d
      return mul(static_cast<float>(static_cast<std::int32_t>(low_high_code(b, 2, i)) - 8), f16_at(b, 0));
    case kQ4_1:  // d, m f16, 16 bytes of codes; q * d + m
      return add(mul(static_cast<float>(low_high_code(b, 4, i)), f16_at(b, 0)), f16_at(b, 2));
    case kQ5_0: {  // d, 32 fifth bits (u32), 16 bytes of low nibbles; (q - 16) * d
      const std::uint32_t q = low_high_code(b, 6, i) | (((u32_at(b, 2) >> i) & 1u) << 4);
      return mul(static_cast<float>(static_cast<std::int32_t>(q) - 16), f16_at(b, 0));
    }
    case kQ5_1: {  // d, m, fifth bits, low nibbles; q * d + m
      const std::uint32_t q = low_high_code(b, 8, i) | (((u32_at(b, 4) >> i) & 1u) << 4);
      return add(mul(static_cast<float>(q), f16_at(b, 0)), f16_at(b, 2));
    }
    case kQ8_0:  // d f16, 32 int8 codes; q * d
      return mul(static_cast<float>(static_cast<std::int8_t>(b[2 + i])), f16_at(b, 0));
    case kQ8_K:  // d f32, 256 int8 codes, 16 int16 sums (not read); q * d
      return mul(static_cast<float>(static_cast<std::int8_t>(b[4 + i])), f32_from_bits(u32_at(b, 0)));
    case kQ2_K: {  // 16 scale/min nibble pairs, 64 bytes of codes, d, dmin; (d*sc) * q - dmin*mn
      const std::uint32_t s = b[i >> 4];
      const float dl = mul(f16_at(b, 80), static_cast<float>(s & 15u));
      const float ml = mul(f16_at(b, 82), static_cast<float>(s >> 4));
      return sub(mul(dl, static_cast<float>(k_code2(b, 16, i))), ml);
    }
    case kQ3_K: {  // 32 bytes of high bits, 64 of codes, 12 of scales, d; (d*sc) * (q - 4*!high)
      const std::uint32_t h = i >> 7, j = (i >> 5) & 3u, gl = i & 31u;
      const bool high = (b[gl] >> (4u * h + j)) & 1u;
      const std::int32_t v = static_cast<std::int32_t>(k_code2(b, 32, i)) - (high ? 0 : 4);
      const float dl = mul(f16_at(b, 108), static_cast<float>(q3k_scale(b, 96, i >> 4)));
      return mul(dl, static_cast<float>(v));
    }
    case kQ4_K: {  // d, dmin, 12 bytes of 6-bit scales/mins, 128 of codes; (d*sc) * q - dmin*mn
      const std::uint32_t sb = i >> 5;
      const float d1 = mul(f16_at(b, 0), static_cast<float>(k_scale(b, 4, sb)));
      const float m1 = mul(f16_at(b, 2), static_cast<float>(k_min(b, 4, sb)));
      return sub(mul(d1, static_cast<float>(k_code4(b, 16, i))), m1);
    }
    case kQ5_K: {  // as Q4_K, with 32 bytes of fifth bits before the codes
      const std::uint32_t sb = i >> 5;
      const std::uint32_t q = k_code4(b, 48, i) | (((b[16u + (i & 31u)] >> sb) & 1u) << 4);
      const float d1 = mul(f16_at(b, 0), static_cast<float>(k_scale(b, 4, sb)));
      const float m1 = mul(f16_at(b, 2), static_cast<float>(k_min(b, 4, sb)));
      return sub(mul(d1, static_cast<float>(q)), m1);
    }
    case kQ6_K: {  // 128 bytes of low nibbles, 64 of high pairs, 16 int8 scales, d; (d*sc) * (q - 32)
      const std::uint32_t h = i >> 7, k = (i >> 5) & 3u, l = i & 31u;
      const std::uint32_t low = b[64u * h + 32u * (k & 1u) + l] >> (4u * (k >> 1)) & 15u;
      const std::uint32_t high = (b[128u + 32u * h + l] >> (2u * k)) & 3u;
      const std::int32_t q = static_cast<std::int32_t>(low | (high << 4)) - 32;
      const float dl = mul(f16_at(b, 208), static_cast<float>(static_cast<std::int8_t>(b[192u + (i >> 4)])));
      return mul(dl, static_cast<float>(q));
    }
    default: return 0.0f;  // not reached: the kind table accepts only the types above
  }
}

// Eight bytes at p as two little-endian words, read A bytes at a time:
// A is the alignment the caller knows p has (1, 2 or 4).
template <std::uint32_t A>
struct Bytes8 {
  std::uint32_t w[2];
  BALLAST_HD explicit Bytes8(const std::uint8_t* p) {
    if constexpr (A >= 4) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
      w[0] = reinterpret_cast<const std::uint32_t*>(p)[0];
      w[1] = reinterpret_cast<const std::uint32_t*>(p)[1];
#else
      __builtin_memcpy(w, p, 8);  // little-endian hosts only (x86-64, AArch64), as the GPUs
#endif
    } else if constexpr (A == 2) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
      const auto* h = reinterpret_cast<const std::uint16_t*>(p);
      w[0] = h[0] | (static_cast<std::uint32_t>(h[1]) << 16);
      w[1] = h[2] | (static_cast<std::uint32_t>(h[3]) << 16);
#else
      w[0] = u32_at(p, 0), w[1] = u32_at(p, 4);
#endif
    } else {
      w[0] = u32_at(p, 0), w[1] = u32_at(p, 4);
    }
  }
  // Byte j (0..7) shifted right by `shift` (< 8): the compiler makes one
  // bit-field extract of it once j is a constant.
  BALLAST_HD std::uint32_t at(std::uint32_t j, std::uint32_t shift) const {
    return w[j >> 2] >> (8u * (j & 3u) + shift);
  }
};

// The eight values of elements i0 .. i0 + 7 (i0 % 8 == 0) of a K-quant
// block (Q2_K .. Q6_K): block_value's for each, by the same operations in
// the same order, with what the eight share read and computed once: the
// sub-block's scale (and min) products, and the code bytes, as two words
// (A: the alignment the block is known to have; every run of eight bytes
// read sits at a multiple of 8 from its start). The GPU kernels decode a
// group per thread (cuda_hip kinds_gguf.cuh); eight calls of block_value
// left three f32 multiplies and two byte loads per element
// (tools/kernel-report). Returns false for any other type (v untouched).
template <std::uint32_t A>
BALLAST_HD inline bool k_group(std::uint32_t type, const std::uint8_t* b, std::uint32_t i0, float (&v)[8]) {
  const std::uint32_t h = i0 >> 7, quarter = (i0 >> 5) & 3u, l0 = i0 & 31u;
  switch (type) {
    case kQ2_K: {
      const std::uint32_t s = b[i0 >> 4];
      const float dl = mul(f16_at(b, 80), static_cast<float>(s & 15u));
      const float ml = mul(f16_at(b, 82), static_cast<float>(s >> 4));
      const Bytes8<A> codes(b + 16u + 32u * h + l0);
      for (std::uint32_t j = 0; j < 8u; ++j)
        v[j] = sub(mul(dl, static_cast<float>(codes.at(j, 2u * quarter) & 3u)), ml);
      return true;
    }
    case kQ3_K: {
      const float dl = mul(f16_at(b, 108), static_cast<float>(q3k_scale(b, 96, i0 >> 4)));
      const Bytes8<A> codes(b + 32u + 32u * h + l0), highs(b + l0);
      for (std::uint32_t j = 0; j < 8u; ++j) {
        const bool high = highs.at(j, 0) >> (4u * h + quarter) & 1u;
        const std::int32_t q = static_cast<std::int32_t>(codes.at(j, 2u * quarter) & 3u) - (high ? 0 : 4);
        v[j] = mul(dl, static_cast<float>(q));
      }
      return true;
    }
    case kQ4_K:
    case kQ5_K: {
      const bool five = type == kQ5_K;
      const std::uint32_t sb = i0 >> 5;
      const float d1 = mul(f16_at(b, 0), static_cast<float>(k_scale(b, 4, sb)));
      const float m1 = mul(f16_at(b, 2), static_cast<float>(k_min(b, 4, sb)));
      const Bytes8<A> codes(b + (five ? 48u : 16u) + (i0 >> 6) * 32u + l0), fifths(b + 16u + l0);
      const std::uint32_t shift = (i0 & 32u) ? 4u : 0u;
      for (std::uint32_t j = 0; j < 8u; ++j) {
        std::uint32_t q = codes.at(j, shift) & 15u;
        if (five) q |= (fifths.at(j, 0) >> sb & 1u) << 4;
        v[j] = sub(mul(d1, static_cast<float>(q)), m1);
      }
      return true;
    }
    case kQ6_K: {
      const float dl = mul(f16_at(b, 208), static_cast<float>(static_cast<std::int8_t>(b[192u + (i0 >> 4)])));
      const Bytes8<A> low(b + 64u * h + 32u * (quarter & 1u) + l0), high(b + 128u + 32u * h + l0);
      for (std::uint32_t j = 0; j < 8u; ++j) {
        const std::uint32_t q = (low.at(j, 4u * (quarter >> 1)) & 15u) | ((high.at(j, 2u * quarter) & 3u) << 4);
        v[j] = mul(dl, static_cast<float>(static_cast<std::int32_t>(q) - 32));
      }
      return true;
    }
    default: return false;
  }
}

// ---------------------------------------------------- repack_gguf_int4
// Q4_0 / Q4_1 into repack_int4's layout (kernel_math.hpp): word j (0..3) of
// a 32-element block holds its columns 8j..8j+7 in repack_word's nibble
// order; the block's pair is (scale, offset) with value = q * scale + offset:
// Q4_0 (d, -(d * 8)), as repack_int4 pairs a zero point of 8; Q4_1 (d, m).
BALLAST_HD inline std::uint32_t q4_codes_at(std::uint32_t type) { return type == kQ4_0 ? 2u : 4u; }

BALLAST_HD inline std::uint32_t q4_repack_word(std::uint32_t type, const std::uint8_t* b, std::uint32_t j) {
  std::uint32_t codes[8];
  for (std::uint32_t c = 0; c < 8u; ++c) codes[c] = low_high_code(b, q4_codes_at(type), 8u * j + c);
  return repack_word(codes);
}

BALLAST_HD inline std::uint32_t q4_repack_pair(std::uint32_t type, const std::uint8_t* b) {
  const float d = f16_at(b, 0);
  if (type == kQ4_0) return repack_scale_pair(d, 8.0f);
  return static_cast<std::uint32_t>(f16_bits_from_f32(d)) | (static_cast<std::uint32_t>(f16_bits_from_f32(f16_at(b, 2))) << 16);
}

}  // namespace ballast::kmath::gguf
