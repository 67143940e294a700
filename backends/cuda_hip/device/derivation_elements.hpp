// What every GPU derivation kernel shares: the 16-byte packet, read-only
// loads, the hardware helpers, the grid-stride cursor and the launch
// geometry. Each kind family's own per-thread work, kernels and host replay
// are in kinds_<family>.cuh; derivation_kernels.cuh joins them.
//
// Kept free of vendor names. Device-only hardware operations (f16
// conversions, round-to-integer, max) are behind `hw_*` helpers whose host
// branch is kernel_math's integer reference: tests/backends/cuda_hip proves the two
// equal (exhaustively over all 2^32 f32 inputs for the f16 conversion).
#pragma once

#include "cuda_hip/device/kernel_args.hpp"
#include <common/kernel_math.hpp>

#include <cstdint>
#include <type_traits>

// Compiled by nvcc or hipcc (both passes): the kernels and their launches
// exist; otherwise (the host tests) only the per-thread functions and the
// replays do.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define BALLAST_KERNEL_COMPILER 1
#else
#define BALLAST_KERNEL_COMPILER 0
#endif
// Whether the kernels themselves are compiled: by nvcc or hipcc, unless the
// includer wants the per-thread functions alone (tools/kernel_report's
// probes, which list every kernel of their object).
#if BALLAST_KERNEL_COMPILER && !defined(BALLAST_ELEMENTS_ONLY)
#define BALLAST_WITH_KERNELS 1
#else
#define BALLAST_WITH_KERNELS 0
#endif

#if BALLAST_KERNEL_COMPILER
#define BALLAST_UNROLL _Pragma("unroll")
#define BALLAST_NO_UNROLL _Pragma("unroll 1")
#else
#define BALLAST_UNROLL
#define BALLAST_NO_UNROLL
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define BALLAST_DEVICE_PASS 1
#else
#define BALLAST_DEVICE_PASS 0
#endif

namespace ballast::gpu::elem {

using std::uint16_t;
using std::uint32_t;
using std::uint64_t;
using std::uint8_t;

// A 16-byte packet: the vector type on the GPU (one 128-bit load/store),
// an aligned struct of the same layout on the host.
#if BALLAST_KERNEL_COMPILER
using Vec4 = ::uint4;
#else
struct alignas(16) Vec4 {
  uint32_t x, y, z, w;
};
#endif

BALLAST_HD inline Vec4 vec4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  Vec4 v;
  v.x = a;
  v.y = b;
  v.z = c;
  v.w = d;
  return v;
}

// A 16-byte load of read-only data that stays one 128-bit load (a plain
// struct copy may be split by the optimiser when its halves feed
// different instructions): ld.global.nc.v4 / global_load_dwordx4.
BALLAST_HD inline Vec4 load16(const Vec4* p) {
#if BALLAST_DEVICE_PASS
  return __ldg(p);
#else
  return *p;
#endif
}

// A 32-bit load of read-only data through the same path.
BALLAST_HD inline uint32_t load4(const uint32_t* p) {
#if BALLAST_DEVICE_PASS
  return __ldg(p);
#else
  return *p;
#endif
}

// Word i (0..3, a compile-time constant after unrolling) of a packet.
BALLAST_HD inline uint32_t word(const Vec4& v, unsigned i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// ------------------------------------------------------ hardware helpers
// f32 -> f16 bits, round to nearest even: the hardware conversion on the
// GPU (cvt.rn.f16.f32 / v_cvt_f16_f32), kernel_math's integer reference on
// the host. Bit-identical for every non-NaN input (tests/backends/cuda_hip
// test_f16_exhaustive); NaN stays NaN (payload may differ, as documented).
BALLAST_HD inline uint16_t hw_f16_from_f32(float f) {
#if BALLAST_DEVICE_PASS
  return __half_as_ushort(__float2half_rn(f));
#else
  return kmath::f16_bits_from_f32(f);
#endif
}

// Two conversions packed little-endian (lo in bits 0..15): one
// cvt.rn.f16x2.f32 on sm_80+.
BALLAST_HD inline uint32_t hw_f16x2_from_f32(float lo, float hi) {
#if BALLAST_DEVICE_PASS
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &h, sizeof u);
  return u;
#else
  return static_cast<uint32_t>(kmath::f16_bits_from_f32(lo)) | (static_cast<uint32_t>(kmath::f16_bits_from_f32(hi)) << 16);
#endif
}

// f16 bits -> f32, exact (hardware on the GPU).
BALLAST_HD inline float hw_f32_from_f16(uint16_t h) {
#if BALLAST_DEVICE_PASS
  return __half2float(__ushort_as_half(h));
#else
  return kmath::f32_from_f16_bits(h);
#endif
}

// max(running, |w|) ignoring NaN w, for a running value that is never NaN
// and never negative: fmaxf returns the non-NaN operand, and |w| is never
// -0, so this is kmath::abs_max_step bit for bit.
BALLAST_HD inline float hw_abs_max(float running, float w) {
#if BALLAST_DEVICE_PASS
  return fmaxf(running, fabsf(w));
#else
  return kmath::abs_max_step(running, w);
#endif
}

// kmath::quant_int8_code as a byte: the f32 division stays IEEE (nvcc's
// default -prec-div=true, HIP's default); NaN quotients give 0, the rest is
// clamped to +-127 and rounded half-to-even by the hardware conversion
// (cvt.rni / v_rndne), exact for |r| <= 127.
BALLAST_HD inline uint32_t hw_quant_code(float w, float scale) {
#if BALLAST_DEVICE_PASS
  if (scale == 0.0f) return 0u;
  const float r = w / scale;
  if (r != r) return 0u;
  return static_cast<uint32_t>(__float2int_rn(fminf(fmaxf(r, -127.0f), 127.0f))) & 0xffu;
#else
  return static_cast<uint8_t>(kmath::quant_int8_code(w, scale));
#endif
}

BALLAST_HD inline float hw_abs(float x) {
#if BALLAST_DEVICE_PASS
  return fabsf(x);
#else
  return kmath::abs_f32(x);
#endif
}

// Round half-to-even to an integral float: rintf on the GPU (cvt.rni.f32 /
// v_rndne_f32), kernel_math's integer rounding on the host; |x| < 2^31.
BALLAST_HD inline float hw_rint(float x) {
#if BALLAST_DEVICE_PASS
  return rintf(x);
#else
  return static_cast<float>(kmath::round_half_even(x));
#endif
}

// hw_quant_code without a division per element. `inv` = 1 / scale (one
// IEEE division per row). For a finite inv, r = w * inv is within
// 2^-23 * |r| + 2^-24 * |r| < 2^-15 of the IEEE quotient w / scale when
// |r| <= 128, which always holds for quant_int8 (|w| <= max|w| and scale is max|w|
// * RN(1/127), so |w / scale| < 127.0001; a given maximum need not bound
// the row, and larger r take the exact path), and RNE rounding can only
// differ between the two when the quotient lies within that distance of a
// half-integer. Those cases (|frac(r) - 0.5| < 2^-14), rows whose inv is
// not finite and non-finite r take the exact division. Proven against
// kmath::quant_int8_code in tests/backends/cuda_hip (test_f16_exhaustive).
BALLAST_HD inline uint32_t quant_code_fast(float w, float inv, bool& exact) {
  const float r = w * inv;
  // quant_int8_given_max's maximum may be below the row's own, so r can be
  // past any int32 (the host's rounding and the cast would be undefined):
  // |r| > 127, infinite and NaN r take the exact path, which clamps.
  if (!(hw_abs(r) <= 127.0f)) {
    exact = true;
    return 0u;
  }
  const float rounded = hw_rint(r);
  const float f = r - rounded;  // in [-0.5, 0.5], exact (Sterbenz)
  if (!(hw_abs(f) < 0.5f - 0x1p-14f)) exact = true;
  return static_cast<uint32_t>(static_cast<int32_t>(rounded)) & 0xffu;
}

BALLAST_HD inline uint32_t quant_code_by_inverse(float w, float scale, float inv, bool inv_ok) {
  bool exact = !inv_ok;
  const uint32_t code = inv_ok ? quant_code_fast(w, inv, exact) : 0u;
  return exact ? hw_quant_code(w, scale) : code;
}

struct QuantScale {
  float scale, inv;
  bool inv_ok;  // inv finite and scale non-zero: the multiply path applies
};

BALLAST_HD inline QuantScale quant_scale(float max_abs) {
  QuantScale q;
  q.scale = kmath::quant_int8_scale(max_abs);
  q.inv = q.scale == 0.0f ? 0.0f : 1.0f / q.scale;
  const uint32_t e = kmath::f32_bits(q.inv) & 0x7f800000u;
  q.inv_ok = q.scale != 0.0f && e != 0x7f800000u;
  return q;
}

// ------------------------------------------------------------ indexing
// A 2-D position (major, minor) walked by a grid-stride loop without any
// division in the loop: the start is one 32-bit division (the linear start
// is a thread number, < 2^32), each step adds a precomputed stride and
// carries.
struct Cursor {
  uint64_t major = 0, minor = 0;
};

BALLAST_HD inline Cursor cursor_at(uint32_t linear, uint64_t minor_count) {
  Cursor c;
  if (minor_count > linear) {
    c.minor = linear;
  } else {
    const uint32_t m = static_cast<uint32_t>(minor_count);  // <= linear < 2^32
    c.major = linear / m;
    c.minor = linear - static_cast<uint32_t>(c.major) * m;
  }
  return c;
}

BALLAST_HD inline void cursor_step(Cursor& c, const Cursor& stride, uint64_t minor_count) {
  c.major += stride.major;
  c.minor += stride.minor;
  if (c.minor >= minor_count) {
    c.minor -= minor_count;
    ++c.major;
  }
}

}  // namespace ballast::gpu::elem

namespace ballast::gpu {

using std::uint16_t;
using std::uint32_t;
using std::uint64_t;
using std::uint8_t;

// Launch geometry of the grid-stride kernels.
inline constexpr unsigned kThreads = 256;
// Enough blocks to fill the largest GPUs several times over; more work
// than this is handled by the grid-stride loops.
inline constexpr uint64_t kMaxBlocks = 1u << 16;

inline unsigned grid_for(uint64_t items, unsigned per_block) {
  const uint64_t blocks = (items + per_block - 1) / per_block;
  if (blocks == 0) return 1;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

inline bool aligned(uint64_t address, uint64_t alignment) { return address % alignment == 0; }

}  // namespace ballast::gpu
