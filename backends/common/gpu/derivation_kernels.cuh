// The derivation kernels, written once for nvcc and hipcc. A translation
// unit includes its vendor header (vendor_cuda.hpp / vendor_hip.hpp) and
// then this file; backends/cuda/cuda_kernels.cu and backends/hip/
// hip_kernels.hip are nothing more than that.
//
// Shape of every kernel: a grid-stride loop over 64-bit work items, so any
// size is covered by a capped grid (never truncated, never an overflowing
// grid dimension); wide (16-byte) loads and stores where the operand
// addresses allow, which a uniform run-time test decides per launch or per
// row; per-element arithmetic from kernel_math.hpp and
// derivation_elements.hpp, shared with the CPU backend and the CPU tests.
#pragma once

#include "gpu/derivation_elements.hpp"
#include "gpu/kernel_args.hpp"
#include "kernel_math.hpp"

#include <cstdint>

namespace ballast::gpu {
namespace {

using std::uint16_t;
using std::uint32_t;
using std::uint64_t;
using std::uint8_t;

constexpr unsigned kThreads = 256;
// Enough blocks to fill the largest GPUs several times over; more work
// than this is handled by the grid-stride loops.
constexpr uint64_t kMaxBlocks = 1u << 16;

unsigned grid_for(uint64_t items, unsigned per_block) {
  const uint64_t blocks = (items + per_block - 1) / per_block;
  if (blocks == 0) return 1;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__device__ inline uint64_t global_thread() { return static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline uint64_t grid_threads() { return static_cast<uint64_t>(gridDim.x) * blockDim.x; }

bool aligned(uint64_t address, uint64_t alignment) { return address % alignment == 0; }

// 64-bit division is a long software sequence on GPUs; most launches fit
// 32 bits, where the hardware path is a few instructions.
__device__ inline void divmod(uint64_t i, uint64_t d, bool narrow, uint64_t& q, uint64_t& r) {
  if (narrow) {
    const uint32_t q32 = static_cast<uint32_t>(i) / static_cast<uint32_t>(d);
    q = q32;
    r = static_cast<uint32_t>(i) - q32 * static_cast<uint32_t>(d);
  } else {
    q = i / d;
    r = i - q * d;
  }
}

// ---------------------------------------------------------------- transpose
// One TILE x TILE tile per block iteration through shared memory, so both
// the read of [rows, cols] and the write of [cols, rows] walk memory along
// rows. Narrow elements get wider tiles so a warp still touches whole
// 32-byte sectors. Rows of the tile are padded to one 4-byte word more than
// a multiple of 128 bytes, so the column-wise reads of the second phase hit
// 32 different banks (a +1 element pad would leave 1- and 2-byte tiles with
// 4- and 2-way conflicts).
constexpr unsigned kTileThreadsX = 32;
constexpr unsigned kTileThreadsY = 8;

template <class T, unsigned TILE>
__global__ void __launch_bounds__(kTileThreadsX* kTileThreadsY)
    transpose_kernel(const T* __restrict__ src, T* __restrict__ dst, uint64_t rows, uint64_t cols) {
  constexpr unsigned kPad = sizeof(T) < 4 ? 4 / sizeof(T) : 1;
  __shared__ T tile[TILE][TILE + kPad];
  const uint64_t tiles_c = (cols + TILE - 1) / TILE;
  const uint64_t tiles = tiles_c * ((rows + TILE - 1) / TILE);
  for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint64_t r0 = (t / tiles_c) * TILE;
    const uint64_t c0 = (t % tiles_c) * TILE;
#pragma unroll
    for (unsigned yy = 0; yy < TILE; yy += kTileThreadsY) {
#pragma unroll
      for (unsigned xx = 0; xx < TILE; xx += kTileThreadsX) {
        const unsigned y = yy + threadIdx.y, x = xx + threadIdx.x;
        const uint64_t r = r0 + y, c = c0 + x;
        if (r < rows && c < cols) tile[y][x] = src[r * cols + c];
      }
    }
    __syncthreads();
#pragma unroll
    for (unsigned yy = 0; yy < TILE; yy += kTileThreadsY) {
#pragma unroll
      for (unsigned xx = 0; xx < TILE; xx += kTileThreadsX) {
        const unsigned y = yy + threadIdx.y, x = xx + threadIdx.x;
        const uint64_t out_r = c0 + y, out_c = r0 + x;
        if (out_r < cols && out_c < rows) dst[out_r * rows + out_c] = tile[x][y];
      }
    }
    __syncthreads();
  }
}

template <class T, unsigned TILE>
void enqueue_transpose(const KernelArgs& a, vendor::Stream stream) {
  const uint64_t tiles = ((a.rows + TILE - 1) / TILE) * ((a.cols + TILE - 1) / TILE);
  transpose_kernel<T, TILE><<<grid_for(tiles, 1), dim3(kTileThreadsX, kTileThreadsY), 0, stream>>>(
      reinterpret_cast<const T*>(a.src), reinterpret_cast<T*>(a.dst), a.rows, a.cols);
}

// ------------------------------------------------------------------- to_f16
// Groups of eight elements: 16-byte stores of f16 (one or two 16-byte
// loads) when both operands are 16-byte aligned, element by element
// otherwise and for the tail.
template <KernelType SRC>
__global__ void __launch_bounds__(kThreads)
    to_f16_kernel(const void* __restrict__ src, uint16_t* __restrict__ dst, uint64_t n, bool wide) {
  const uint64_t first = global_thread(), stride = grid_threads();
  uint64_t scalar_from = 0;
  if (wide) {
    const uint64_t groups = n / 8;
    for (uint64_t g = first; g < groups; g += stride) {
      uint32_t out[4];
      if constexpr (SRC == KernelType::bfloat16) {
        const uint4 in = static_cast<const uint4*>(src)[g];
        const uint32_t words[4] = {in.x, in.y, in.z, in.w};
#pragma unroll
        for (unsigned i = 0; i < 4; ++i) {
          out[i] = kmath::f16_bits_from_bf16_bits(static_cast<uint16_t>(words[i] & 0xffffu)) |
                   (static_cast<uint32_t>(kmath::f16_bits_from_bf16_bits(static_cast<uint16_t>(words[i] >> 16))) << 16);
        }
      } else {
        const uint4 lo = static_cast<const uint4*>(src)[2 * g];
        const uint4 hi = static_cast<const uint4*>(src)[2 * g + 1];
        const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (unsigned i = 0; i < 4; ++i) {
          out[i] = kmath::f16_bits_from_f32(kmath::f32_from_bits(words[2 * i])) |
                   (static_cast<uint32_t>(kmath::f16_bits_from_f32(kmath::f32_from_bits(words[2 * i + 1]))) << 16);
        }
      }
      reinterpret_cast<uint4*>(dst)[g] = make_uint4(out[0], out[1], out[2], out[3]);
    }
    scalar_from = groups * 8;
  }
  for (uint64_t i = scalar_from + first; i < n; i += stride) dst[i] = elem::to_f16_element(src, SRC, i);
}

// ------------------------------------------------------------- dequant_int4
// One thread per group of eight columns of one row: one 4-byte load of B,
// one 16-byte store of eight f16 when the row is long enough and aligned.
template <KernelType SCALES>
__global__ void __launch_bounds__(kThreads) dequant_int4_kernel(KernelArgs a) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(a.src);
  uint16_t* out = reinterpret_cast<uint16_t*>(a.dst);
  const uint64_t kb = elem::int4_k_blocks(a.cols, a.block_size);
  const uint64_t row_bytes = elem::int4_row_bytes(kb, a.block_size);
  const uint64_t groups_per_row = (a.cols + 7) / 8;
  const uint64_t groups = a.rows * groups_per_row;
  const bool narrow = groups <= 0xffffffffull;
  const bool word_loads = a.src % 4 == 0;
  const bool wide_stores = a.dst % 16 == 0 && a.cols % 8 == 0;
  for (uint64_t g = global_thread(); g < groups; g += grid_threads()) {
    uint64_t n, j;
    divmod(g, groups_per_row, narrow, n, j);
    const uint64_t k0 = 8 * j;
    const uint64_t block = k0 / a.block_size;
    const float scale = elem::int4_scale(reinterpret_cast<const void*>(a.scales), SCALES, n * kb + block);
    const float zp = elem::int4_zero_point(a.zero_points, reinterpret_cast<const void*>(a.zero_point), SCALES, kb, n, block);
    const uint8_t* p = b + n * row_bytes + 4 * j;
    const uint32_t codes = word_loads ? *reinterpret_cast<const uint32_t*>(p) : elem::load_u32_le(p);
    uint16_t h[8];
    elem::dequant_group(codes, zp, scale, h);
    uint16_t* o = out + n * a.cols + k0;
    if (wide_stores) {
      *reinterpret_cast<uint4*>(o) = make_uint4(h[0] | (uint32_t(h[1]) << 16), h[2] | (uint32_t(h[3]) << 16),
                                                h[4] | (uint32_t(h[5]) << 16), h[6] | (uint32_t(h[7]) << 16));
    } else {
      const uint64_t valid = a.cols - k0 < 8 ? a.cols - k0 : 8;
      for (unsigned c = 0; c < valid; ++c) o[c] = h[c];
    }
  }
}

// -------------------------------------------------------------- repack_int4
// Words: one thread per output word (a group of eight columns).
template <KernelType SCALES>
__global__ void __launch_bounds__(kThreads) repack_words_kernel(KernelArgs a) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(a.src);
  uint8_t* out = reinterpret_cast<uint8_t*>(a.dst);
  const uint64_t kb = elem::int4_k_blocks(a.cols, a.block_size);
  const uint64_t row_bytes = elem::int4_row_bytes(kb, a.block_size);
  const uint64_t groups_per_row = (a.cols + 7) / 8;
  const uint64_t groups = a.rows * groups_per_row;
  const bool narrow = groups <= 0xffffffffull;
  const bool word_loads = a.src % 4 == 0;
  const bool word_stores = a.dst % 4 == 0;
  for (uint64_t g = global_thread(); g < groups; g += grid_threads()) {
    uint64_t n, j;
    divmod(g, groups_per_row, narrow, n, j);
    const uint64_t k0 = 8 * j;
    const uint64_t block = k0 / a.block_size;
    const uint8_t* p = b + n * row_bytes + 4 * j;
    const uint32_t codes = word_loads ? *reinterpret_cast<const uint32_t*>(p) : elem::load_u32_le(p);
    const float zp = elem::int4_zero_point(a.zero_points, reinterpret_cast<const void*>(a.zero_point), SCALES, kb, n, block);
    const uint32_t word = elem::repack_group(codes, a.cols - k0, zp);
    uint8_t* o = out + 4 * g;
    if (word_stores) {
      *reinterpret_cast<uint32_t*>(o) = word;
    } else {
      for (unsigned i = 0; i < 4; ++i) o[i] = static_cast<uint8_t>(word >> (8 * i));
    }
  }
}

// Pairs: one thread per (row, block).
template <KernelType SCALES>
__global__ void __launch_bounds__(kThreads) repack_pairs_kernel(KernelArgs a) {
  uint8_t* out = reinterpret_cast<uint8_t*>(a.dst2);
  const uint64_t kb = elem::int4_k_blocks(a.cols, a.block_size);
  const uint64_t blocks = a.rows * kb;
  const bool narrow = blocks <= 0xffffffffull;
  const bool word_stores = a.dst2 % 4 == 0;
  for (uint64_t i = global_thread(); i < blocks; i += grid_threads()) {
    uint64_t n, block;
    divmod(i, kb, narrow, n, block);
    const float scale = elem::int4_scale(reinterpret_cast<const void*>(a.scales), SCALES, i);
    const float zp = elem::int4_zero_point(a.zero_points, reinterpret_cast<const void*>(a.zero_point), SCALES, kb, n, block);
    const uint32_t pair = kmath::repack_scale_pair(scale, zp);
    uint8_t* o = out + 4 * i;
    if (word_stores) {
      *reinterpret_cast<uint32_t*>(o) = pair;
    } else {
      for (unsigned k = 0; k < 4; ++k) o[k] = static_cast<uint8_t>(pair >> (8 * k));
    }
  }
}

// --------------------------------------------------------------- quant_int8
// One block per row (grid-stride over rows): a strided pass for max|w|, a
// shared-memory tree reduction (no warp intrinsics, so the same code is
// right for 32- and 64-wide wavefronts), then a second pass writing codes,
// four per 32-bit store where the row's addresses allow. The second read
// of the row is mostly served from L2.
template <KernelType SRC, unsigned THREADS>
__global__ void __launch_bounds__(THREADS)
    quant_int8_kernel(const void* __restrict__ src, int8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                      uint64_t rows, uint64_t cols) {
  __shared__ float partial[THREADS];
  constexpr uint64_t kElemBytes = SRC == KernelType::float16 ? 2 : 4;
  const uint8_t* base = static_cast<const uint8_t*>(src);
  for (uint64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    const void* row = base + n * cols * kElemBytes;
    int8_t* code_row = codes + n * cols;
    // Four elements per step when the row allows 4-element loads and 4-code stores.
    const bool quads = reinterpret_cast<uint64_t>(row) % (4 * kElemBytes) == 0 &&
                       reinterpret_cast<uint64_t>(code_row) % 4 == 0;
    const uint64_t quad_end = quads ? cols / 4 * 4 : 0;

    float m = 0.0f;
    for (uint64_t k = 4 * threadIdx.x; k < quad_end; k += 4 * THREADS) {
      float w[4];
      if (SRC == KernelType::float16) {
        const uint2 v = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(row) + k);
        w[0] = kmath::f32_from_f16_bits(v.x & 0xffff);
        w[1] = kmath::f32_from_f16_bits(v.x >> 16);
        w[2] = kmath::f32_from_f16_bits(v.y & 0xffff);
        w[3] = kmath::f32_from_f16_bits(v.y >> 16);
      } else {
        const float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(row) + k);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
      }
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) m = kmath::abs_max_step(m, w[i]);
    }
    for (uint64_t k = quad_end + threadIdx.x; k < cols; k += THREADS) m = kmath::abs_max_step(m, elem::quant_source(row, SRC, k));
    partial[threadIdx.x] = m;
    __syncthreads();
#pragma unroll
    for (unsigned half = THREADS / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] = kmath::abs_max_step(partial[threadIdx.x], partial[threadIdx.x + half]);
      __syncthreads();
    }
    const float scale = kmath::quant_int8_scale(partial[0]);
    if (threadIdx.x == 0) {
      uint32_t bits = kmath::f32_bits(scale);
      for (unsigned i = 0; i < 4; ++i) scales[4 * n + i] = static_cast<uint8_t>(bits >> (8 * i));
    }

    for (uint64_t k = 4 * threadIdx.x; k < quad_end; k += 4 * THREADS) {
      uint32_t packed = 0;
#pragma unroll
      for (unsigned i = 0; i < 4; ++i) {
        const float w = elem::quant_source(row, SRC, k + i);
        packed |= static_cast<uint32_t>(static_cast<uint8_t>(kmath::quant_int8_code(w, scale))) << (8 * i);
      }
      *reinterpret_cast<uint32_t*>(code_row + k) = packed;
    }
    for (uint64_t k = quad_end + threadIdx.x; k < cols; k += THREADS)
      code_row[k] = kmath::quant_int8_code(elem::quant_source(row, SRC, k), scale);
    __syncthreads();  // partial[] is reused by the next row
  }
}

template <KernelType SRC>
void enqueue_quant_int8(const KernelArgs& a, vendor::Stream stream) {
  const unsigned grid = grid_for(a.rows, 1);
  const void* src = reinterpret_cast<const void*>(a.src);
  int8_t* codes = reinterpret_cast<int8_t*>(a.dst);
  uint8_t* scales = reinterpret_cast<uint8_t*>(a.dst2);
  // Short rows would leave most of a 256-thread block idle.
  if (a.cols >= 2048) {
    quant_int8_kernel<SRC, 256><<<grid, 256, 0, stream>>>(src, codes, scales, a.rows, a.cols);
  } else {
    quant_int8_kernel<SRC, 64><<<grid, 64, 0, stream>>>(src, codes, scales, a.rows, a.cols);
  }
}

}  // namespace

int enqueue_derivation(const KernelArgs& a, void* stream_handle) {
  const auto stream = static_cast<vendor::Stream>(stream_handle);
  // The runtime's last-error slot still holds any earlier failed call (an
  // allocation refused as out of memory, say), already reported to its
  // caller; drop it, so what is read after the launch is this launch's own.
  // (Found on an H200: a refused cudaMalloc made the next launch fail.)
  static_cast<void>(vendor::take_launch_error());
  const uint64_t elements = a.rows * a.cols;
  switch (a.kind) {
    case KernelKind::transpose:
      if (elements == 0) return 0;
      switch (a.element_bytes) {
        case 1: enqueue_transpose<uint8_t, 128>(a, stream); break;
        case 2: enqueue_transpose<uint16_t, 64>(a, stream); break;
        case 4: enqueue_transpose<uint32_t, 32>(a, stream); break;
        default: enqueue_transpose<unsigned long long, 32>(a, stream); break;
      }
      break;
    case KernelKind::to_f16: {
      if (elements == 0) return 0;
      const bool wide = aligned(a.src, 16) && aligned(a.dst, 16);
      const unsigned grid = grid_for(wide ? elements / 8 + 1 : elements, kThreads);
      const void* src = reinterpret_cast<const void*>(a.src);
      uint16_t* dst = reinterpret_cast<uint16_t*>(a.dst);
      if (a.src_type == KernelType::bfloat16) {
        to_f16_kernel<KernelType::bfloat16><<<grid, kThreads, 0, stream>>>(src, dst, elements, wide);
      } else {
        to_f16_kernel<KernelType::float32><<<grid, kThreads, 0, stream>>>(src, dst, elements, wide);
      }
      break;
    }
    case KernelKind::dequant_int4: {
      const unsigned grid = grid_for(a.rows * ((a.cols + 7) / 8), kThreads);
      if (a.src_type == KernelType::float16) {
        dequant_int4_kernel<KernelType::float16><<<grid, kThreads, 0, stream>>>(a);
      } else {
        dequant_int4_kernel<KernelType::float32><<<grid, kThreads, 0, stream>>>(a);
      }
      break;
    }
    case KernelKind::repack_int4: {
      const unsigned words = grid_for(a.rows * ((a.cols + 7) / 8), kThreads);
      const unsigned pairs = grid_for(a.rows * elem::int4_k_blocks(a.cols, a.block_size), kThreads);
      if (a.src_type == KernelType::float16) {
        repack_words_kernel<KernelType::float16><<<words, kThreads, 0, stream>>>(a);
        repack_pairs_kernel<KernelType::float16><<<pairs, kThreads, 0, stream>>>(a);
      } else {
        repack_words_kernel<KernelType::float32><<<words, kThreads, 0, stream>>>(a);
        repack_pairs_kernel<KernelType::float32><<<pairs, kThreads, 0, stream>>>(a);
      }
      break;
    }
    case KernelKind::quant_int8:
      if (a.rows == 0) return 0;
      if (a.src_type == KernelType::float16) {
        enqueue_quant_int8<KernelType::float16>(a, stream);
      } else {
        enqueue_quant_int8<KernelType::float32>(a, stream);
      }
      break;
  }
  return vendor::take_launch_error();
}

}  // namespace ballast::gpu
