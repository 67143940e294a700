// The per-thread work of the GPU derivation kernels: every load, store and
// piece of arithmetic one thread does between two barriers, written as
// plain functions of (thread, tile/row, pointers). The kernels in
// derivation_kernels.cuh are loops and barriers around these; the CPU tests
// (tests/backends/cuda_hip/host_kernels.hpp) replay the same functions thread by
// thread, phase by phase, so index arithmetic, fast-path conditions and
// arithmetic are all checked against the scalar reference on the CPU.
//
// Kept free of vendor names. Device-only hardware operations (f16
// conversions, round-to-integer, max) are behind `hw_*` helpers whose host
// branch is kernel_math's integer reference: tests/backends/cuda_hip proves the two
// equal (exhaustively over all 2^32 f32 inputs for the f16 conversion).
#pragma once

#include "cuda_hip/device/kernel_args.hpp"
#include <common/gguf_blocks.hpp>
#include <common/kernel_math.hpp>

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__) || defined(__HIPCC__)
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
#if defined(__CUDACC__) || defined(__HIPCC__)
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
// |r| <= 128, which always holds here (|w| <= max|w| and scale is max|w|
// * RN(1/127), so |w / scale| < 127.0001), and RNE rounding can only
// differ between the two when the quotient lies within that distance of a
// half-integer. Those cases (|frac(r) - 0.5| < 2^-14), rows whose inv is
// not finite and non-finite r take the exact division. Proven against
// kmath::quant_int8_code in tests/backends/cuda_hip (test_f16_exhaustive).
BALLAST_HD inline uint32_t quant_code_fast(float w, float inv, bool& exact) {
  const float r = w * inv;
  const float rounded = hw_rint(r);
  const float f = r - rounded;  // in [-0.5, 0.5], exact (Sterbenz)
  // NaN and infinite r fail the comparisons too.
  if (!(hw_abs(f) < 0.5f - 0x1p-14f && hw_abs(r) <= 127.0f)) exact = true;
  return static_cast<uint32_t>(static_cast<int32_t>(rounded)) & 0xffu;  // |r| <= 127 when !exact
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

// ------------------------------------------------------------ transpose
// Tiles of 128 bytes by 128 bytes' worth of rows: TS = 128 / E elements on
// a side (E the element size). A tile is 64 micro-blocks of V x V elements
// (V = 16 / E, one 16-byte packet per micro-block row); TRANSPOSE_THREADS
// threads, one micro-block each.
//
// Fast path (a full tile, every row of both matrices 16-byte aligned):
//   load:  thread (mr, mc) issues its V packet loads (rows r0 + V*mr + q,
//          packet mc) before anything else, transposes the V x V block in
//          registers, and stores V packets into shared memory, which holds
//          the tile already transposed: TS output rows of 8 packets, the
//          packet index XOR-swizzled with (row / V) & 7 so each quarter-warp
//          touches 8 different bank groups;
//   store: each thread moves TS / 8 packets from shared memory to the
//          output, eight threads per 128-byte output row segment.
// Other tiles (edges, unaligned operands) go element by element through
// the same shared memory.
constexpr unsigned kTransposeThreads = 64;

template <unsigned E>
struct TransposeGeometry {
  static constexpr unsigned V = 16 / E;    // elements per packet
  static constexpr unsigned TS = 128 / E;  // tile side in elements
  static constexpr unsigned kPackets = TS * 8;
};

// Half `h` (0 low, 1 high) of a and of b, packed (a's in the low half).
BALLAST_HD inline uint32_t perm_halves(uint32_t a, uint32_t b, unsigned h) {
#if BALLAST_DEVICE_PASS
  return __byte_perm(a, b, h ? 0x7632u : 0x5410u);
#else
  return h ? ((a >> 16) | (b & 0xffff0000u)) : ((a & 0xffffu) | (b << 16));
#endif
}

// Byte `s` of a, b, c and d, packed in that order (a's in the low byte).
BALLAST_HD inline uint32_t gather_bytes(uint32_t a, uint32_t b, uint32_t c, uint32_t d, unsigned s) {
#if BALLAST_DEVICE_PASS
  const unsigned pair = s | ((s + 4) << 4);
  return __byte_perm(__byte_perm(a, b, pair), __byte_perm(c, d, pair), 0x5410u);
#else
  const unsigned sh = 8 * s;
  return ((a >> sh) & 0xffu) | (((b >> sh) & 0xffu) << 8) | (((c >> sh) & 0xffu) << 16) | (((d >> sh) & 0xffu) << 24);
#endif
}

// Element q of an output packet p of the micro-block: element p of input
// row q. Built word by word; every index is a constant after unrolling.
template <unsigned E>
BALLAST_HD inline Vec4 transpose_micro(const Vec4* in, unsigned p) {
  uint32_t w[4];
BALLAST_UNROLL
  for (unsigned i = 0; i < 4; ++i) {
    if constexpr (E == 8) {  // V = 2: packet = 2 elements of 2 words
      w[i] = word(in[i >> 1], 2 * p + (i & 1));
    } else if constexpr (E == 4) {  // V = 4
      w[i] = word(in[i], p);
    } else if constexpr (E == 2) {  // V = 8: word i = half p of rows 2i, 2i+1
      const uint32_t a = word(in[2 * i], p >> 1), b = word(in[2 * i + 1], p >> 1);
      w[i] = perm_halves(a, b, p & 1);
    } else {  // V = 16: word i = byte p of rows 4i .. 4i+3
      w[i] = gather_bytes(word(in[4 * i], p >> 2), word(in[4 * i + 1], p >> 2), word(in[4 * i + 2], p >> 2),
                          word(in[4 * i + 3], p >> 2), p & 3);
    }
  }
  return vec4(w[0], w[1], w[2], w[3]);
}

BALLAST_HD inline unsigned swizzled(unsigned out_row, unsigned packet, unsigned v) {
  return out_row * 8 + (packet ^ ((out_row / v) & 7u));
}

// Fast path, phase 1. `src` points at element (0, 0); the tile starts at
// (r0, c0); `cols` is the source row length in elements.
template <class T>
BALLAST_HD inline void transpose_fast_load(const T* __restrict__ src, uint64_t cols, uint64_t r0, uint64_t c0,
                                           unsigned thread, Vec4* tile) {
  using G = TransposeGeometry<sizeof(T)>;
  const unsigned mr = thread >> 3, mc = thread & 7;
  const uint64_t stride = cols * sizeof(T) / 16;  // packets per source row
  const Vec4* p = reinterpret_cast<const Vec4*>(src + (r0 + G::V * mr) * cols + c0) + mc;
  Vec4 in[G::V];
BALLAST_UNROLL
  for (unsigned q = 0; q < G::V; ++q) in[q] = load16(p + q * stride);
BALLAST_UNROLL
  for (unsigned q = 0; q < G::V; ++q) tile[swizzled(G::V * mc + q, mr, G::V)] = transpose_micro<sizeof(T)>(in, q);
}

// Fast path, phase 2: the transposed tile to dst ([cols, rows]).
template <class T>
BALLAST_HD inline void transpose_fast_store(T* __restrict__ dst, uint64_t rows, uint64_t r0, uint64_t c0,
                                            unsigned thread, const Vec4* tile) {
  using G = TransposeGeometry<sizeof(T)>;
  const unsigned pk = thread & 7;
  const uint64_t stride = rows * sizeof(T) / 16;  // packets per output row
  Vec4* out = reinterpret_cast<Vec4*>(dst + (c0 + (thread >> 3)) * rows + r0) + pk;
  constexpr unsigned kSteps = G::kPackets / kTransposeThreads;
BALLAST_UNROLL
  for (unsigned s = 0; s < kSteps; ++s) {
    const unsigned row = s * (kTransposeThreads / 8) + (thread >> 3);
    out[uint64_t(s) * (kTransposeThreads / 8) * stride] = tile[swizzled(row, pk, G::V)];
  }
}

// Edge path, phase 1: elements of the tile inside the matrix, row-major
// into the shared tile (as TS x TS elements).
template <class T>
BALLAST_HD inline void transpose_edge_load(const T* __restrict__ src, uint64_t rows, uint64_t cols, uint64_t r0,
                                           uint64_t c0, unsigned thread, Vec4* tile) {
  constexpr unsigned TS = TransposeGeometry<sizeof(T)>::TS;
  T* t = reinterpret_cast<T*>(tile);
  const unsigned h = rows - r0 < TS ? static_cast<unsigned>(rows - r0) : TS;
  const unsigned w = cols - c0 < TS ? static_cast<unsigned>(cols - c0) : TS;
  for (unsigned i = thread; i < TS * TS; i += kTransposeThreads) {
    const unsigned y = i / TS, x = i % TS;
    if (y < h && x < w) t[i] = src[(r0 + y) * cols + c0 + x];
  }
}

template <class T>
BALLAST_HD inline void transpose_edge_store(T* __restrict__ dst, uint64_t rows, uint64_t cols, uint64_t r0,
                                            uint64_t c0, unsigned thread, const Vec4* tile) {
  constexpr unsigned TS = TransposeGeometry<sizeof(T)>::TS;
  const T* t = reinterpret_cast<const T*>(tile);
  const unsigned h = rows - r0 < TS ? static_cast<unsigned>(rows - r0) : TS;
  const unsigned w = cols - c0 < TS ? static_cast<unsigned>(cols - c0) : TS;
  for (unsigned i = thread; i < TS * TS; i += kTransposeThreads) {
    const unsigned y = i / TS, x = i % TS;  // output row c0 + y, column r0 + x
    if (y < w && x < h) dst[(c0 + y) * rows + r0 + x] = t[x * TS + y];
  }
}

// Whether every tile row of both matrices is 16-byte aligned.
inline bool transpose_wide(uint64_t src, uint64_t dst, uint64_t rows, uint64_t cols, unsigned element_bytes) {
  return src % 16 == 0 && dst % 16 == 0 && (rows * element_bytes) % 16 == 0 && (cols * element_bytes) % 16 == 0;
}

// ---------------------------------------------------------------- to_f16
// Eight elements -> one 16-byte packet of f16.
BALLAST_HD inline Vec4 to_f16_packet_f32(const Vec4& lo, const Vec4& hi) {
  return vec4(hw_f16x2_from_f32(kmath::f32_from_bits(lo.x), kmath::f32_from_bits(lo.y)),
              hw_f16x2_from_f32(kmath::f32_from_bits(lo.z), kmath::f32_from_bits(lo.w)),
              hw_f16x2_from_f32(kmath::f32_from_bits(hi.x), kmath::f32_from_bits(hi.y)),
              hw_f16x2_from_f32(kmath::f32_from_bits(hi.z), kmath::f32_from_bits(hi.w)));
}

BALLAST_HD inline uint32_t bf16x2_to_f16x2(uint32_t w) {
  return hw_f16x2_from_f32(kmath::f32_from_bits(w << 16), kmath::f32_from_bits(w & 0xffff0000u));
}

BALLAST_HD inline Vec4 to_f16_packet_bf16(const Vec4& in) {
  return vec4(bf16x2_to_f16x2(in.x), bf16x2_to_f16x2(in.y), bf16x2_to_f16x2(in.z), bf16x2_to_f16x2(in.w));
}

BALLAST_HD inline uint16_t to_f16_element(const void* src, KernelType type, uint64_t index) {
  if (type == KernelType::bfloat16)
    return hw_f16_from_f32(kmath::f32_from_bf16_bits(static_cast<const uint16_t*>(src)[index]));
  return hw_f16_from_f32(static_cast<const float*>(src)[index]);
}

// ------------------------------------------------------------------ int4
// Eight int4 codes of consecutive columns 8j..8j+7 of one row, as stored in
// MatMulNBits B (byte b: low nibble column 2b, high nibble 2b+1), read as a
// little-endian word: nibble c is then column 8j+c. Byte-wise, so any
// alignment works.
BALLAST_HD inline uint32_t load_u32_le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

BALLAST_HD inline uint32_t nibble(uint32_t codes, uint32_t c) { return (codes >> (4u * c)) & 0xfu; }

BALLAST_HD inline uint64_t int4_k_blocks(uint64_t k, uint32_t block_size) { return (k + block_size - 1u) / block_size; }

// Bytes of one row of B: k_blocks blocks of block_size/2 bytes.
BALLAST_HD inline uint64_t int4_row_bytes(uint64_t k_blocks, uint32_t block_size) { return k_blocks * (block_size / 2u); }

// log2 of the power-of-two block size.
BALLAST_HD inline uint32_t int4_block_shift(uint32_t block_size) {
  uint32_t s = 0;
  while ((1u << s) < block_size) ++s;
  return s;
}

// Scales typed by their element: f32, or f16 bits.
BALLAST_HD inline float int4_scale(const float* scales, uint64_t index) { return scales[index]; }
BALLAST_HD inline float int4_scale(const uint16_t* scales, uint64_t index) { return hw_f32_from_f16(scales[index]); }

// The zero point of block `block` of row `n` as a float, in any of its
// forms; `zero_points` is the operand's bytes, S the scales' element type.
template <class S>
BALLAST_HD inline float int4_zero_point(ZeroPoints form, const uint8_t* zero_points, uint64_t k_blocks,
                                        uint64_t n, uint64_t block) {
  switch (form) {
    case ZeroPoints::packed_u4: {
      const uint32_t byte = zero_points[n * ((k_blocks + 1u) / 2u) + (block >> 1)];
      return static_cast<float>((block & 1u) ? (byte >> 4) : (byte & 0xfu));
    }
    case ZeroPoints::unpacked:
      return int4_scale(reinterpret_cast<const S*>(zero_points), n * k_blocks + block);
    case ZeroPoints::absent:
      break;
  }
  return kmath::kDefaultZeroPoint;
}

// dequant_int4 of one group of eight codes: one packet of eight f16
// (column 8j+c in half c).
BALLAST_HD inline uint32_t dequant_pair(uint32_t codes, unsigned c, float zero_point, float scale) {
  return hw_f16x2_from_f32(kmath::dequant_f32(nibble(codes, c), zero_point, scale),
                           kmath::dequant_f32(nibble(codes, c + 1), zero_point, scale));
}

BALLAST_HD inline Vec4 dequant_group(uint32_t codes, float zero_point, float scale) {
  return vec4(dequant_pair(codes, 0, zero_point, scale), dequant_pair(codes, 2, zero_point, scale),
              dequant_pair(codes, 4, zero_point, scale), dequant_pair(codes, 6, zero_point, scale));
}

// Eight codes (nibble c = column c) to a repacked word (even columns in
// the low half-word, odd in the high one): kmath::repack_word by whole-word
// bit moves.
BALLAST_HD inline uint32_t repack_codes(uint32_t codes) {
  uint32_t even = codes & 0x0f0f0f0fu, odd = (codes >> 4) & 0x0f0f0f0fu;
  even = (even | (even >> 4)) & 0x00ff00ffu;
  odd = (odd | (odd >> 4)) & 0x00ff00ffu;
  even = (even | (even >> 8)) & 0x0000ffffu;
  odd = (odd | (odd >> 8)) & 0x0000ffffu;
  return even | (odd << 16);
}

// repack_int4 of one group: columns at or past `valid` (K - 8j, when the
// group runs past K) hold the block's zero-point code instead of B's bytes.
BALLAST_HD inline uint32_t repack_group(uint32_t codes, uint64_t valid, float zero_point) {
  if (valid < 8) {
    const uint32_t keep = (1u << (4u * static_cast<uint32_t>(valid))) - 1u;  // valid <= 7
    codes = (codes & keep) | ((kmath::zero_point_code(zero_point) * 0x11111111u) & ~keep);
  }
  return repack_codes(codes);
}

BALLAST_HD inline uint32_t repack_pair(float scale, float zero_point) {
  return hw_f16x2_from_f32(scale, -(scale * zero_point));
}

// One int4 work item: a chunk of 32 columns (16 bytes of B, four groups)
// of row n, the unit of both int4 kernels.
struct Int4Shape {
  uint64_t rows, cols, k_blocks, row_bytes, chunks_per_row;
  uint64_t groups_per_row;  // of eight columns: dequant's wide work items
  uint32_t block_shift;
  ZeroPoints zero_points;
  bool wide;  // aligned whole work items: dequant's groups, repack's 16-byte chunks (int4_shape)
};

template <class S>
inline Int4Shape int4_shape(uint64_t rows, uint64_t cols, uint32_t block_size, ZeroPoints zp, uint64_t src,
                            uint64_t dst, bool repack) {
  Int4Shape s;
  s.rows = rows;
  s.cols = cols;
  s.k_blocks = int4_k_blocks(cols, block_size);
  s.row_bytes = int4_row_bytes(s.k_blocks, block_size);
  s.chunks_per_row = (cols + 31) / 32;
  s.groups_per_row = (cols + 7) / 8;
  s.block_shift = int4_block_shift(block_size);
  s.zero_points = zp;
  // dequant: output rows of K f16 start 16-byte aligned when K % 8 == 0,
  // codes are read as words (rows of B are whole words);
  // repack: rows of ceil(K/8) words when K % 32 == 0, codes read as packets.
  s.wide = repack ? src % 16 == 0 && s.row_bytes % 16 == 0 && dst % 16 == 0 && cols % 32 == 0
                  : src % 4 == 0 && dst % 16 == 0 && cols % 8 == 0;
  return s;
}

// The fast path of dequant_int4 (a launch whose shape is wide): one group
// of eight columns of row n per work item, a 32-bit load of its codes and
// a 16-byte store of its f16, so neighbouring threads load neighbouring
// words and store neighbouring packets. (Chunks of 32 columns per thread,
// a 16-byte load and four 16-byte stores, put a warp's stores 64 bytes
// apart in each instruction, twice the L2 write sectors of a contiguous
// store: 0.52x of a copy on an H200.) Groups never cross a block: a
// block is a power of two of at least 16 columns.
template <class S>
BALLAST_HD inline void dequant_group_wide(const Int4Shape& s, uint64_t n, uint64_t group, const uint8_t* __restrict__ b,
                                          const S* __restrict__ scales, const uint8_t* __restrict__ zps,
                                          uint16_t* __restrict__ out) {
  const uint64_t k0 = 8 * group;
  const uint32_t codes = load4(reinterpret_cast<const uint32_t*>(b + n * s.row_bytes + 4 * group));
  const uint64_t block = k0 >> s.block_shift;
  const float scale = int4_scale(scales, n * s.k_blocks + block);
  const float zp = int4_zero_point<S>(s.zero_points, zps, s.k_blocks, n, block);
  *reinterpret_cast<Vec4*>(out + n * s.cols + k0) = dequant_group(codes, zp, scale);
}

template <class S>
BALLAST_HD inline void dequant_chunk(const Int4Shape& s, uint64_t n, uint64_t chunk, const uint8_t* __restrict__ b,
                                     const S* __restrict__ scales, const uint8_t* __restrict__ zps,
                                     uint16_t* __restrict__ out) {
  const uint64_t k0 = 32 * chunk;
  const uint8_t* in = b + n * s.row_bytes + 16 * chunk;
  uint16_t* o = out + n * s.cols + k0;
  const uint64_t block_a = k0 >> s.block_shift;
  const float scale_a = int4_scale(scales, n * s.k_blocks + block_a);
  const float zp_a = int4_zero_point<S>(s.zero_points, zps, s.k_blocks, n, block_a);
  // Partial or unaligned chunk: group by group.
  for (unsigned g = 0; g < 4; ++g) {
    const uint64_t k = k0 + 8 * g;
    if (k >= s.cols) break;
    const uint64_t block = k >> s.block_shift;
    const float scale = block == block_a ? scale_a : int4_scale(scales, n * s.k_blocks + block);
    const float zp = block == block_a ? zp_a : int4_zero_point<S>(s.zero_points, zps, s.k_blocks, n, block);
    const uint8_t* p = in + 4 * g;
    const uint32_t codes = reinterpret_cast<uint64_t>(p) % 4 == 0 ? *reinterpret_cast<const uint32_t*>(p) : load_u32_le(p);
    const Vec4 h = dequant_group(codes, zp, scale);
    uint16_t* og = o + 8 * g;
    if (k + 8 <= s.cols && reinterpret_cast<uint64_t>(og) % 16 == 0) {
      *reinterpret_cast<Vec4*>(og) = h;
    } else {
      const unsigned valid = s.cols - k < 8 ? static_cast<unsigned>(s.cols - k) : 8u;
      for (unsigned c = 0; c < valid; ++c) og[c] = static_cast<uint16_t>(word(h, c >> 1) >> (16 * (c & 1)));
    }
  }
}

BALLAST_HD inline void repack_words_wide(const uint8_t* __restrict__ in, uint32_t* __restrict__ o) {
  const Vec4 codes = load16(reinterpret_cast<const Vec4*>(in));
  *reinterpret_cast<Vec4*>(o) = vec4(repack_codes(codes.x), repack_codes(codes.y), repack_codes(codes.z), repack_codes(codes.w));
}

// The fast path of a repack chunk (whole, 16-byte aligned, 4-byte aligned
// pairs), for tools/kernel-report's probes: the same steps as repack_chunk.
template <class S>
BALLAST_HD inline void repack_chunk_wide(const Int4Shape& s, uint64_t n, uint64_t chunk, const uint8_t* __restrict__ b,
                                         const S* __restrict__ scales, const uint8_t* __restrict__ zps,
                                         uint32_t* __restrict__ words, uint32_t* __restrict__ pairs) {
  const uint64_t k0 = 32 * chunk;
  repack_words_wide(b + n * s.row_bytes + 16 * chunk, words + n * ((s.cols + 7) / 8) + 4 * chunk);
  const uint64_t mask = (uint64_t(1) << s.block_shift) - 1;
  for (unsigned h = 0; h < 2; ++h) {
    const uint64_t k = k0 + 16 * h;
    if (k >= s.cols || (k & mask) != 0) continue;
    const uint64_t block = k >> s.block_shift;
    const uint64_t i = n * s.k_blocks + block;
    pairs[i] = repack_pair(int4_scale(scales, i), int4_zero_point<S>(s.zero_points, zps, s.k_blocks, n, block));
  }
}

// repack_int4 of one chunk: four words, and the scale/offset pair of every
// block that starts in the chunk (each block starts in exactly one chunk,
// at its column 0 or 16, since block_size is a power of two >= 16).
template <class S>
BALLAST_HD inline void repack_chunk(const Int4Shape& s, uint64_t n, uint64_t chunk, const uint8_t* __restrict__ b,
                                    const S* __restrict__ scales, const uint8_t* __restrict__ zps,
                                    uint32_t* __restrict__ words, uint32_t* __restrict__ pairs, bool pairs_aligned) {
  const uint64_t k0 = 32 * chunk;
  const uint8_t* in = b + n * s.row_bytes + 16 * chunk;
  const uint64_t words_per_row = (s.cols + 7) / 8;
  uint32_t* o = words + n * words_per_row + 4 * chunk;
  // The chunk's second half may lie wholly past K (the row's last chunk):
  // its block is then one past the last, and no column of it is used, but
  // its zero point must still not be read past the end (ASan found it).
  const uint64_t block_a = k0 >> s.block_shift;
  const uint64_t half_b = (k0 + 16) >> s.block_shift;
  const uint64_t block_b = half_b < s.k_blocks ? half_b : s.k_blocks - 1;
  const float zp_a = int4_zero_point<S>(s.zero_points, zps, s.k_blocks, n, block_a);
  const float zp_b = block_b == block_a ? zp_a : int4_zero_point<S>(s.zero_points, zps, s.k_blocks, n, block_b);
  if (s.wide && k0 + 32 <= s.cols) {
    repack_words_wide(in, o);
  } else {
    for (unsigned g = 0; g < 4; ++g) {
      const uint64_t k = k0 + 8 * g;
      if (k >= s.cols) break;
      const uint8_t* p = in + 4 * g;
      const uint32_t codes = reinterpret_cast<uint64_t>(p) % 4 == 0 ? *reinterpret_cast<const uint32_t*>(p) : load_u32_le(p);
      const uint32_t w = repack_group(codes, s.cols - k, g < 2 ? zp_a : zp_b);
      uint32_t* og = o + g;
      if (reinterpret_cast<uint64_t>(og) % 4 == 0) {
        *og = w;
      } else {
        uint8_t* ob = reinterpret_cast<uint8_t*>(og);
        for (unsigned i = 0; i < 4; ++i) ob[i] = static_cast<uint8_t>(w >> (8 * i));
      }
    }
  }
  const uint64_t mask = (uint64_t(1) << s.block_shift) - 1;
  for (unsigned h = 0; h < 2; ++h) {
    const uint64_t k = k0 + 16 * h;
    if (k >= s.cols || (k & mask) != 0) continue;
    const uint64_t block = h == 0 ? block_a : block_b;
    const uint64_t i = n * s.k_blocks + block;
    const uint32_t pair = repack_pair(int4_scale(scales, i), h == 0 ? zp_a : zp_b);
    if (pairs_aligned) {
      pairs[i] = pair;
    } else {
      uint8_t* ob = reinterpret_cast<uint8_t*>(pairs + i);
      for (unsigned j = 0; j < 4; ++j) ob[j] = static_cast<uint8_t>(pair >> (8 * j));
    }
  }
}

// ------------------------------------------------------------ quant_int8
// One row per block of THREADS threads. Fast path (the row in 16-element
// slabs: source and codes 16-byte aligned, K % 16 == 0): each thread loads
// its slabs (slab t, t + THREADS, ...) with 16-byte loads, the first kept
// in registers for the second pass, and writes each slab's 16 codes with
// one 16-byte store. Otherwise element by element (both passes read the
// source).

template <class S>
struct QuantSlab {
  static constexpr unsigned kPackets = sizeof(S) == 4 ? 4 : 2;  // 16-byte packets per 16 elements
  Vec4 v[kPackets];
};

template <class S>
BALLAST_HD inline float quant_slab_element(const QuantSlab<S>& s, unsigned e) {
  if constexpr (sizeof(S) == 4) {
    return kmath::f32_from_bits(word(s.v[e >> 2], e & 3));
  } else {
    return hw_f32_from_f16(static_cast<uint16_t>(word(s.v[e >> 3], (e >> 1) & 3) >> (16 * (e & 1))));
  }
}

template <class S>
BALLAST_HD inline QuantSlab<S> quant_load_slab(const S* row, uint64_t slab) {
  QuantSlab<S> s;
  const Vec4* p = reinterpret_cast<const Vec4*>(row + 16 * slab);
BALLAST_UNROLL
  for (unsigned i = 0; i < QuantSlab<S>::kPackets; ++i) s.v[i] = load16(p + i);
  return s;
}

template <class S>
BALLAST_HD inline float quant_slab_max(const QuantSlab<S>& s, float m) {
BALLAST_UNROLL
  for (unsigned e = 0; e < 16; ++e) m = hw_abs_max(m, quant_slab_element(s, e));
  return m;
}

// The codes of a slab by the reciprocal; sets `exact` if any element
// needs the division (then the caller recomputes the slab).
template <class S>
BALLAST_HD inline Vec4 quant_slab_codes_fast(const QuantSlab<S>& s, float inv, bool& exact) {
  uint32_t w[4];
BALLAST_UNROLL
  for (unsigned i = 0; i < 4; ++i) {
    w[i] = quant_code_fast(quant_slab_element(s, 4 * i), inv, exact) |
           (quant_code_fast(quant_slab_element(s, 4 * i + 1), inv, exact) << 8) |
           (quant_code_fast(quant_slab_element(s, 4 * i + 2), inv, exact) << 16) |
           (quant_code_fast(quant_slab_element(s, 4 * i + 3), inv, exact) << 24);
  }
  return vec4(w[0], w[1], w[2], w[3]);
}

template <class S>
BALLAST_HD inline float quant_element(const S* row, uint64_t k) {
  if constexpr (sizeof(S) == 4) {
    return row[k];
  } else {
    return hw_f32_from_f16(row[k]);
  }
}

// The codes of slab `slab` of `row` by the exact division, element by
// element from memory (cached), in a loop kept rolled so the long division
// sequence exists once.
template <class S>
BALLAST_HD inline Vec4 quant_slab_codes_exact(const S* row, uint64_t slab, float scale) {
  uint32_t w0 = 0, w1 = 0, w2 = 0, w3 = 0;
  const S* p = row + 16 * slab;
BALLAST_NO_UNROLL
  for (unsigned e = 0; e < 16; ++e) {
    const uint32_t code = hw_quant_code(quant_element(p, e), scale) << (8 * (e & 3));
    const unsigned i = e >> 2;
    w0 |= i == 0 ? code : 0u;
    w1 |= i == 1 ? code : 0u;
    w2 |= i == 2 ? code : 0u;
    w3 |= i == 3 ? code : 0u;
  }
  return vec4(w0, w1, w2, w3);
}

// Per-thread state between the two passes: the thread's first slab stays
// in registers (K <= 16 * THREADS: the whole row); later slabs (longer
// rows) are read again in pass 2, mostly from L2. (Selecting between the
// cached and a loaded slab in one loop made HIP keep the slab in private
// memory behind flat accesses.)
template <class S>
struct QuantThread {
  QuantSlab<S> cached;
  float max_abs = 0.0f;
};

// Pass 1 of one thread over row `row` (K elements).
template <class S, unsigned THREADS>
BALLAST_HD inline void quant_pass1(const S* __restrict__ row, uint64_t cols, bool slabs, unsigned thread,
                                   QuantThread<S>& t) {
  float m = 0.0f;
  if (slabs) {
    const uint64_t count = cols / 16;
    if (thread < count) {
      t.cached = quant_load_slab(row, thread);
      m = quant_slab_max(t.cached, m);
    }
    for (uint64_t slab = thread + THREADS; slab < count; slab += THREADS) m = quant_slab_max(quant_load_slab(row, slab), m);
  } else {
    for (uint64_t k = thread; k < cols; k += THREADS) m = hw_abs_max(m, quant_element(row, k));
  }
  t.max_abs = m;
}

// Pass 2: the codes of row `row` from the row's scale.
template <class S, unsigned THREADS>
BALLAST_HD inline void quant_pass2(const S* __restrict__ row, uint64_t cols, bool slabs, unsigned thread,
                                   const QuantThread<S>& t, const QuantScale& scale, uint8_t* __restrict__ codes) {
  if (slabs) {
    const uint64_t count = cols / 16;
    Vec4* out = reinterpret_cast<Vec4*>(codes);
    // Codes by the reciprocal; if any of the thread's elements needs the
    // exact division (rare), its slabs are redone once, in one place (more
    // copies of the division cost HIP scalar-register spills).
    bool exact = !scale.inv_ok;
    if (thread < count) out[thread] = quant_slab_codes_fast(t.cached, scale.inv, exact);
    for (uint64_t slab = thread + THREADS; slab < count; slab += THREADS)
      out[slab] = quant_slab_codes_fast(quant_load_slab(row, slab), scale.inv, exact);
    if (exact) {
      for (uint64_t slab = thread; slab < count; slab += THREADS) out[slab] = quant_slab_codes_exact(row, slab, scale.scale);
    }
  } else {
    for (uint64_t k = thread; k < cols; k += THREADS)
      codes[k] = static_cast<uint8_t>(quant_code_by_inverse(quant_element(row, k), scale.scale, scale.inv, scale.inv_ok));
  }
}

inline bool quant_slabs(uint64_t src, uint64_t dst, uint64_t cols) {
  return src % 16 == 0 && dst % 16 == 0 && cols % 16 == 0;
}

BALLAST_HD inline void store_f32_bytes(uint8_t* out, float value) {
  const uint32_t bits = kmath::f32_bits(value);
  if (reinterpret_cast<uint64_t>(out) % 4 == 0) {
    *reinterpret_cast<uint32_t*>(out) = bits;
  } else {
    for (unsigned i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(bits >> (8 * i));
  }
}

// ------------------------------------------------------------ dequant_gguf
// One work item per group of eight outputs of a row (columns 8j..8j+7):
// every value from kmath::gguf::block_value, the shared arithmetic, with
// the block type a template argument so its switch folds to one case. A
// group lies in one block (blocks of 32 or 256 elements) or covers eight
// one-element blocks (the plain float types), so a thread decodes only
// its own block's scales, and neighbouring threads read neighbouring
// bytes. Wide launches (dst 16-byte aligned, cols % 8 == 0, so every row
// starts 16-byte aligned) store each group with one 16-byte store of f16
// or two of f32; otherwise element by element, up to the row's end.

static_assert(static_cast<uint32_t>(KernelType::q4_0) == kmath::gguf::kQ4_0 &&
                  static_cast<uint32_t>(KernelType::q8_0) == kmath::gguf::kQ8_0 &&
                  static_cast<uint32_t>(KernelType::q2_k) == kmath::gguf::kQ2_K &&
                  static_cast<uint32_t>(KernelType::q8_k) == kmath::gguf::kQ8_K &&
                  static_cast<uint32_t>(KernelType::bfloat16) == kmath::gguf::kBF16,
              "KernelType and kmath::gguf::Type number the block types alike");

template <KernelType T>
struct GgufGeometry {
  static constexpr uint32_t kElements = kinds::gguf_block(static_cast<DataType>(T))->elements;
  static constexpr uint32_t kBytes = kinds::gguf_block(static_cast<DataType>(T))->bytes;
  static_assert(kElements == 1 || kElements % 8 == 0, "a group of eight never straddles two blocks");
};

struct GgufShape {
  uint64_t rows, cols, groups_per_row, row_bytes;
  bool wide;     // dst 16-byte aligned and cols % 8 == 0: whole groups, 16-byte stores
  bool packets;  // wide, a plain float type and src 16-byte aligned: the group's bytes in 16-byte loads
};

template <KernelType T>
inline GgufShape gguf_shape(uint64_t rows, uint64_t cols, uint64_t src, uint64_t dst) {
  using G = GgufGeometry<T>;
  GgufShape s;
  s.rows = rows;
  s.cols = cols;
  s.groups_per_row = (cols + 7) / 8;
  s.row_bytes = cols / G::kElements * G::kBytes;  // cols is whole blocks (derivation_sizes checked it)
  s.wide = dst % 16 == 0 && cols % 8 == 0;
  // Plain types: a group is 16 or 32 bytes of the source, and rows of
  // cols % 8 == 0 elements keep every group 16-byte aligned.
  s.packets = s.wide && G::kElements == 1 && src % 16 == 0;
  return s;
}

// The value of column c0 + j of a row whose group starts at c0 (c0 % 8 == 0).
// HALF (block types) says what the caller knows of the group's place in its
// block: -1 nothing, 0 the first half, 1 the second. Every index is written
// so the compiler sees what the eight calls share: the position in the block
// is (a multiple of 8) | j, so i >> 5, i & 32 and the like fold to one value
// per group and each scale is decoded once, not once per element; and with
// the half known, the branches of block_value on it (sub-blocks 0..3 or
// 4..7 of Q4_K/Q5_K, the low or high nibbles of Q4_0, ...) fold too. (PTX
// instructions per 16 bytes: Q4_K 446 -> 147, Q4_0 153 -> 84.)
template <KernelType T, int HALF = -1>
BALLAST_HD inline float gguf_value(const uint8_t* __restrict__ row, uint64_t c0, uint32_t j) {
  using G = GgufGeometry<T>;
  constexpr uint32_t type = static_cast<uint32_t>(T);
  if constexpr (G::kElements == 1) {
    return kmath::gguf::block_value(type, row + (c0 + j) * G::kBytes, 0);
  } else {
    const uint8_t* block = row + c0 / G::kElements * G::kBytes;
    uint32_t i0 = static_cast<uint32_t>(c0 % G::kElements) & ~7u;  // ~7u: c0 % 8 == 0, said to the compiler
    if constexpr (HALF == 0) i0 &= G::kElements / 2 - 1;             // the caller knows i0 < E / 2
    if constexpr (HALF == 1) i0 |= G::kElements / 2;                 // ... or i0 >= E / 2
    return kmath::gguf::block_value(type, block, i0 | j);
  }
}

// Work item -> group of a row. Within each span of 64 groups, items 0..31
// take the first halves of the span's blocks and items 32..63 the second
// halves, so the 32 items of a warp (consecutive from a multiple of 32, when
// groups_per_row % 32 == 0) all take the same side of gguf_group_values'
// branch on the half; a warp still stores whole runs of 32 bytes or more
// (two groups of a half block of 32, sixteen of one of 256). The row's last
// span, if shorter, keeps the plain order. Plain float types: as is.
template <KernelType T>
BALLAST_HD inline uint64_t gguf_group_of_item(const GgufShape& s, uint64_t item) {
  using G = GgufGeometry<T>;
  if constexpr (G::kElements == 1) {
    return item;
  } else {
    constexpr uint64_t H = G::kElements / 16;  // groups per half block: 2 or 16
    const uint64_t span = item & ~uint64_t(63);
    if (span + 64 > s.groups_per_row) return item;
    const uint64_t half = (item >> 5) & 1, q = item & 31;
    return span + (q / H) * (2 * H) + half * H + q % H;
  }
}

// The eight values of a whole group starting at column c0 of `row`.
template <KernelType T, int HALF>
BALLAST_HD inline void gguf_group_values(const GgufShape& s, const uint8_t* __restrict__ row, uint64_t c0,
                                         float (&v)[8]) {
  using G = GgufGeometry<T>;
  if constexpr (G::kElements == 1) {
    // Byte loads of a plain f32/f16/bf16 source touch 8 (f32) or 4 cache
    // lines per warp instruction, 32 or 16 instructions per group: the L1
    // would bound the kernel below the copy. Aligned, the group is one or
    // two 16-byte loads, and block_value reads each element's bytes from
    // registers (every offset a constant after unrolling).
    if (s.packets) {
      constexpr uint32_t kPackets = 8 * G::kBytes / 16;
      Vec4 in[kPackets];
      const Vec4* p = reinterpret_cast<const Vec4*>(row + c0 * G::kBytes);
BALLAST_UNROLL
      for (uint32_t i = 0; i < kPackets; ++i) in[i] = load16(p + i);
      // Each element's bytes copied out of the words, not read through a
      // byte pointer into `in`: hipcc kept such an array in LDS.
BALLAST_UNROLL
      for (uint32_t j = 0; j < 8; ++j) {
        uint8_t e[G::kBytes];
BALLAST_UNROLL
        for (uint32_t k = 0; k < G::kBytes; ++k) {
          const uint32_t q = j * G::kBytes + k;  // byte of the group
          e[k] = static_cast<uint8_t>(word(in[q / 16], (q / 4) % 4) >> (8 * (q % 4)));
        }
        v[j] = kmath::gguf::block_value(static_cast<uint32_t>(T), e, 0);
      }
      return;
    }
  }
BALLAST_UNROLL
  for (uint32_t j = 0; j < 8; ++j) v[j] = gguf_value<T, HALF>(row, c0, j);
}

// A whole group from column c0 (HALF as for gguf_value): eight values and
// one 16-byte store of f16 or two of f32. tools/kernel-report's probes run
// this for one half, as one thread does.
template <KernelType T, class OUT, int HALF>
BALLAST_HD inline void gguf_store_group(const GgufShape& s, const uint8_t* __restrict__ row, uint64_t c0,
                                        OUT* __restrict__ out) {
  float v[8];
  gguf_group_values<T, HALF>(s, row, c0, v);
  if constexpr (sizeof(OUT) == 2) {
    *reinterpret_cast<Vec4*>(out) = vec4(hw_f16x2_from_f32(v[0], v[1]), hw_f16x2_from_f32(v[2], v[3]),
                                         hw_f16x2_from_f32(v[4], v[5]), hw_f16x2_from_f32(v[6], v[7]));
  } else {
    Vec4* o = reinterpret_cast<Vec4*>(out);
    o[0] = vec4(kmath::f32_bits(v[0]), kmath::f32_bits(v[1]), kmath::f32_bits(v[2]), kmath::f32_bits(v[3]));
    o[1] = vec4(kmath::f32_bits(v[4]), kmath::f32_bits(v[5]), kmath::f32_bits(v[6]), kmath::f32_bits(v[7]));
  }
}

// Work item `item` of row n (a group of eight outputs: gguf_group_of_item).
// OUT is uint16_t (f16 bits, dequant_gguf) or float (dequant_gguf_f32).
template <KernelType T, class OUT>
BALLAST_HD inline void gguf_group(const GgufShape& s, uint64_t n, uint64_t item, const uint8_t* __restrict__ src,
                                  OUT* __restrict__ dst) {
  const uint8_t* row = src + n * s.row_bytes;
  const uint64_t c0 = 8 * gguf_group_of_item<T>(s, item);
  OUT* out = dst + n * s.cols + c0;
  if (s.wide) {
    using G = GgufGeometry<T>;
    if constexpr (G::kElements == 1) {
      gguf_store_group<T, OUT, -1>(s, row, c0, out);
    } else if (c0 % G::kElements < G::kElements / 2) {  // uniform in a warp (gguf_group_of_item)
      gguf_store_group<T, OUT, 0>(s, row, c0, out);
    } else {
      gguf_store_group<T, OUT, 1>(s, row, c0, out);
    }
    return;
  }
  // The row's last group may be short (plain types: cols need not be a
  // multiple of 8); dst is aligned to its element size only.
  const uint32_t count = s.cols - c0 < 8 ? static_cast<uint32_t>(s.cols - c0) : 8u;
  for (uint32_t j = 0; j < count; ++j) {
    const float v = gguf_value<T>(row, c0, j);
    if constexpr (sizeof(OUT) == 2) {
      out[j] = hw_f16_from_f32(v);
    } else {
      out[j] = v;
    }
  }
}

// Calls f(std::integral_constant<KernelType, T>{}) for the block type t
// (host code: the kernels' enqueue and the CPU replay); false for a type
// the GGUF kinds do not read.
template <class F>
inline bool with_gguf_type(KernelType t, F&& f) {
#define BALLAST_GGUF_CASE_(name)                                  \
  case KernelType::name:                                          \
    f(std::integral_constant<KernelType, KernelType::name>{});    \
    return true;
  switch (t) {
    BALLAST_GGUF_CASE_(float32)
    BALLAST_GGUF_CASE_(float16)
    BALLAST_GGUF_CASE_(bfloat16)
    BALLAST_GGUF_CASE_(q4_0)
    BALLAST_GGUF_CASE_(q4_1)
    BALLAST_GGUF_CASE_(q5_0)
    BALLAST_GGUF_CASE_(q5_1)
    BALLAST_GGUF_CASE_(q8_0)
    BALLAST_GGUF_CASE_(q2_k)
    BALLAST_GGUF_CASE_(q3_k)
    BALLAST_GGUF_CASE_(q4_k)
    BALLAST_GGUF_CASE_(q5_k)
    BALLAST_GGUF_CASE_(q6_k)
    BALLAST_GGUF_CASE_(q8_k)
    default: return false;
  }
#undef BALLAST_GGUF_CASE_
}

// ------------------------------------------------------- repack_gguf_int4
// Q4_0 / Q4_1 blocks as stored into repack_int4's outputs: one work item
// per block (32 columns), its four words and its (scale, offset) pair, from
// kmath::gguf::q4_repack_word / q4_repack_pair with the block type a
// template argument so their type tests fold. Rows are whole blocks, so
// the blocks of all rows are one sequence: block i's source is at
// i * kBytes, its words at 4i, its pair at i. Wide launches (dst 16-byte
// aligned) store the words with one 16-byte store; otherwise word by word
// (bytes where a word is not 4-byte aligned). Pairs are 4-byte stores when
// dst2 is 4-byte aligned, bytes otherwise, as repack_int4's.
template <KernelType T>
BALLAST_HD inline void q4_repack_words(const uint8_t* __restrict__ block, uint32_t (&w)[4]) {
  constexpr uint32_t type = static_cast<uint32_t>(T);
BALLAST_UNROLL
  for (uint32_t j = 0; j < 4; ++j) w[j] = kmath::gguf::q4_repack_word(type, block, j);
}

template <KernelType T>
BALLAST_HD inline void q4_repack_block(const uint8_t* __restrict__ src, uint64_t i, uint32_t* __restrict__ words,
                                       uint32_t* __restrict__ pairs, bool wide, bool pairs_aligned) {
  static_assert(T == KernelType::q4_0 || T == KernelType::q4_1, "repack_gguf_int4 reads Q4_0 and Q4_1");
  using G = GgufGeometry<T>;
  const uint8_t* block = src + i * G::kBytes;
  uint32_t w[4];
  q4_repack_words<T>(block, w);
  uint32_t* o = words + 4 * i;
  if (wide) {
    *reinterpret_cast<Vec4*>(o) = vec4(w[0], w[1], w[2], w[3]);
  } else {
    for (unsigned j = 0; j < 4; ++j) {
      if (reinterpret_cast<uint64_t>(o + j) % 4 == 0) {
        o[j] = w[j];
      } else {
        uint8_t* ob = reinterpret_cast<uint8_t*>(o + j);
        for (unsigned k = 0; k < 4; ++k) ob[k] = static_cast<uint8_t>(w[j] >> (8 * k));
      }
    }
  }
  const uint32_t pair = kmath::gguf::q4_repack_pair(static_cast<uint32_t>(T), block);
  if (pairs_aligned) {
    pairs[i] = pair;
  } else {
    uint8_t* ob = reinterpret_cast<uint8_t*>(pairs + i);
    for (unsigned k = 0; k < 4; ++k) ob[k] = static_cast<uint8_t>(pair >> (8 * k));
  }
}

// Calls f(std::integral_constant<KernelType, T>{}) for Q4_0 or Q4_1; false
// for any other type.
template <class F>
inline bool with_q4_type(KernelType t, F&& f) {
  switch (t) {
    case KernelType::q4_0: f(std::integral_constant<KernelType, KernelType::q4_0>{}); return true;
    case KernelType::q4_1: f(std::integral_constant<KernelType, KernelType::q4_1>{}); return true;
    default: return false;
  }
}

}  // namespace ballast::gpu::elem
