// The int4 (MatMulNBits) kernels on CUDA and HIP (dequant_int4 and repack_int4), written once
// for nvcc and hipcc. One file per kind family, in three parts:
//   elem::   each thread's work between two barriers, plain functions
//            compiled for host and device;
//   kernels  the kernels, their launches and run_<kind>(), the row that
//            derivation_kernels.cuh's dispatch takes for each kind (nvcc
//            and hipcc only);
//   replay   replay_<kind>(): the kernels' walks run on the CPU thread by
//            thread, phase by phase, over the same elem:: functions
//            (BALLAST_HOST_REPLAY: tests/backends/cuda_hip), checked against
//            the scalar reference.
// The replay sits beside the kernel it mirrors, so a change to one is made
// next to the other, and a kind of this family is added here and nowhere
// else in backends/cuda_hip (docs/architecture.md).
#pragma once

#include "cuda_hip/device/derivation_elements.hpp"

namespace ballast::gpu::elem {

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

}  // namespace ballast::gpu::elem

#if BALLAST_WITH_KERNELS
namespace ballast::gpu {
namespace {

// --------------------------------------------------------------- int4
// repack, and dequant when the shape is not wide: one thread per chunk of
// 32 columns (16 bytes of B) of one row: a 16-byte load of B and one
// 16-byte store of four words (repack, which also writes the pairs of the
// blocks starting in the chunk: one launch), group by group for dequant.
// Wide dequant: one thread per group of eight columns (a 32-bit load of
// codes, a 16-byte store; neighbouring threads, neighbouring packets).
// (row, item) is a cursor: no division per item.
template <class S>
__global__ void __launch_bounds__(kThreads)
    dequant_int4_kernel(const uint8_t* __restrict__ b, const S* __restrict__ scales, const uint8_t* __restrict__ zps,
                        uint16_t* __restrict__ out, elem::Int4Shape shape, elem::Cursor stride) {
  for (elem::Cursor c = elem::cursor_at(blockIdx.x * kThreads + threadIdx.x, shape.chunks_per_row); c.major < shape.rows;
       elem::cursor_step(c, stride, shape.chunks_per_row))
    elem::dequant_chunk(shape, c.major, c.minor, b, scales, zps, out);
}

template <class S>
__global__ void __launch_bounds__(kThreads)
    dequant_int4_groups_kernel(const uint8_t* __restrict__ b, const S* __restrict__ scales,
                               const uint8_t* __restrict__ zps, uint16_t* __restrict__ out, elem::Int4Shape shape,
                               elem::Cursor stride) {
  for (elem::Cursor c = elem::cursor_at(blockIdx.x * kThreads + threadIdx.x, shape.groups_per_row); c.major < shape.rows;
       elem::cursor_step(c, stride, shape.groups_per_row))
    elem::dequant_group_wide(shape, c.major, c.minor, b, scales, zps, out);
}

template <class S>
__global__ void __launch_bounds__(kThreads)
    repack_int4_kernel(const uint8_t* __restrict__ b, const S* __restrict__ scales, const uint8_t* __restrict__ zps,
                       uint32_t* __restrict__ words, uint32_t* __restrict__ pairs, elem::Int4Shape shape,
                       elem::Cursor stride, bool pairs_aligned) {
  for (elem::Cursor c = elem::cursor_at(blockIdx.x * kThreads + threadIdx.x, shape.chunks_per_row); c.major < shape.rows;
       elem::cursor_step(c, stride, shape.chunks_per_row))
    elem::repack_chunk(shape, c.major, c.minor, b, scales, zps, words, pairs, pairs_aligned);
}

template <class S>
void enqueue_int4(const KernelArgs& a, vendor::Stream stream) {
  const bool repack = a.kind == Derivation::repack_int4;
  const elem::Int4Shape shape =
      elem::int4_shape<S>(a.rows, a.cols, a.block_size, a.zero_points, a.src, a.dst, repack);
  const auto* b = reinterpret_cast<const uint8_t*>(a.src);
  const auto* scales = reinterpret_cast<const S*>(a.scales);
  const auto* zps = reinterpret_cast<const uint8_t*>(a.zero_point);
  if (!repack && shape.wide) {
    const unsigned grid = grid_for(a.rows * shape.groups_per_row, kThreads);
    dequant_int4_groups_kernel<S><<<grid, kThreads, 0, stream>>>(
        b, scales, zps, reinterpret_cast<uint16_t*>(a.dst), shape, elem::cursor_at(grid * kThreads, shape.groups_per_row));
    return;
  }
  const unsigned grid = grid_for(a.rows * shape.chunks_per_row, kThreads);
  const elem::Cursor stride = elem::cursor_at(grid * kThreads, shape.chunks_per_row);
  if (repack) {
    repack_int4_kernel<S><<<grid, kThreads, 0, stream>>>(b, scales, zps, reinterpret_cast<uint32_t*>(a.dst),
                                                          reinterpret_cast<uint32_t*>(a.dst2), shape, stride,
                                                          aligned(a.dst2, 4));
  } else {
    dequant_int4_kernel<S><<<grid, kThreads, 0, stream>>>(b, scales, zps, reinterpret_cast<uint16_t*>(a.dst), shape,
                                                           stride);
  }
}

// dequant_int4 and repack_int4 (enqueue_int4 tells them apart).
bool run_int4(const KernelArgs& a, vendor::Stream stream) {
  if (a.rows * a.cols == 0) return false;
  if (a.src_type == KernelType::float16) {
    enqueue_int4<uint16_t>(a, stream);
  } else {
    enqueue_int4<float>(a, stream);
  }
  return true;
}

bool run_dequant_int4(const KernelArgs& a, vendor::Stream stream) { return run_int4(a, stream); }
bool run_repack_int4(const KernelArgs& a, vendor::Stream stream) { return run_int4(a, stream); }

}  // namespace
}  // namespace ballast::gpu
#endif

#ifdef BALLAST_HOST_REPLAY
namespace ballast::gpu::testing {

template <class S>
void int4_on_host(const KernelArgs& a) {
  const bool repack = a.kind == Derivation::repack_int4;
  const elem::Int4Shape shape = elem::int4_shape<S>(a.rows, a.cols, a.block_size, a.zero_points, a.src, a.dst, repack);
  const auto* b = reinterpret_cast<const std::uint8_t*>(a.src);
  const auto* scales = reinterpret_cast<const S*>(a.scales);
  const auto* zps = reinterpret_cast<const std::uint8_t*>(a.zero_point);
  // The kernels' cursor walk with a small "grid" of 7 threads, so the
  // stride's carry is exercised.
  constexpr std::uint32_t kThreads = 7;
  if (!repack && shape.wide) {  // dequant_int4_groups_kernel
    const elem::Cursor stride = elem::cursor_at(kThreads, shape.groups_per_row);
    for (std::uint32_t t = 0; t < kThreads; ++t)
      for (elem::Cursor c = elem::cursor_at(t, shape.groups_per_row); c.major < shape.rows;
           elem::cursor_step(c, stride, shape.groups_per_row))
        elem::dequant_group_wide(shape, c.major, c.minor, b, scales, zps, reinterpret_cast<std::uint16_t*>(a.dst));
    return;
  }
  const elem::Cursor stride = elem::cursor_at(kThreads, shape.chunks_per_row);
  for (std::uint32_t t = 0; t < kThreads; ++t) {
    for (elem::Cursor c = elem::cursor_at(t, shape.chunks_per_row); c.major < shape.rows;
         elem::cursor_step(c, stride, shape.chunks_per_row)) {
      if (repack) {
        elem::repack_chunk(shape, c.major, c.minor, b, scales, zps, reinterpret_cast<std::uint32_t*>(a.dst),
                           reinterpret_cast<std::uint32_t*>(a.dst2), a.dst2 % 4 == 0);
      } else {
        elem::dequant_chunk(shape, c.major, c.minor, b, scales, zps, reinterpret_cast<std::uint16_t*>(a.dst));
      }
    }
  }
}

inline void replay_int4(const KernelArgs& a) {
  if (a.src_type == KernelType::float16) {
    int4_on_host<uint16_t>(a);
  } else {
    int4_on_host<float>(a);
  }
}
inline void replay_dequant_int4(const KernelArgs& a) { replay_int4(a); }
inline void replay_repack_int4(const KernelArgs& a) { replay_int4(a); }

}  // namespace ballast::gpu::testing
#endif
