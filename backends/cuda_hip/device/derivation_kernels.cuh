// The derivation kernels, written once for nvcc and hipcc. A translation
// unit includes its vendor header (vendor_cuda.hpp / vendor_hip.hpp) and
// then this file; backends/cuda_hip/cuda/cuda_kernels.cu and backends/cuda_hip/hip/
// hip_kernels.hip are nothing more than that.
//
// Shape of every kernel: a grid-stride loop over 64-bit work items, so any
// size is covered by a capped grid (never truncated, never an overflowing
// grid dimension); wide (16-byte) loads and stores where the operand
// addresses allow, which a uniform run-time test decides per launch or per
// row; per-element arithmetic from kernel_math.hpp and
// derivation_elements.hpp, shared with the CPU backend and the CPU tests.
#pragma once

#include "cuda_hip/device/derivation_elements.hpp"
#include "cuda_hip/device/kernel_args.hpp"
#include <common/kernel_math.hpp>

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

bool aligned(uint64_t address, uint64_t alignment) { return address % alignment == 0; }

// ---------------------------------------------------------------- transpose
// derivation_elements.hpp has the tile geometry and the per-thread phases.
// One tile per block iteration; the (tile row, tile column) cursor walks
// the grid-stride loop without divisions.
template <class T>
__global__ void __launch_bounds__(elem::kTransposeThreads)
    transpose_kernel(const T* __restrict__ src, T* __restrict__ dst, uint64_t rows, uint64_t cols, uint64_t tiles_c,
                     elem::Cursor stride, bool wide) {
  using G = elem::TransposeGeometry<sizeof(T)>;
  __shared__ elem::Vec4 tile[G::kPackets];
  const uint64_t tiles_r = (rows + G::TS - 1) / G::TS;
  for (elem::Cursor t = elem::cursor_at(blockIdx.x, tiles_c); t.major < tiles_r; elem::cursor_step(t, stride, tiles_c)) {
    const uint64_t r0 = t.major * G::TS, c0 = t.minor * G::TS;
    if (wide && r0 + G::TS <= rows && c0 + G::TS <= cols) {
      elem::transpose_fast_load(src, cols, r0, c0, threadIdx.x, tile);
      __syncthreads();
      elem::transpose_fast_store(dst, rows, r0, c0, threadIdx.x, tile);
    } else {
      elem::transpose_edge_load(src, rows, cols, r0, c0, threadIdx.x, tile);
      __syncthreads();
      elem::transpose_edge_store(dst, rows, cols, r0, c0, threadIdx.x, tile);
    }
    __syncthreads();
  }
}

template <class T>
void enqueue_transpose(const KernelArgs& a, vendor::Stream stream) {
  constexpr unsigned TS = elem::TransposeGeometry<sizeof(T)>::TS;
  const uint64_t tiles_c = (a.cols + TS - 1) / TS;
  const unsigned grid = grid_for(((a.rows + TS - 1) / TS) * tiles_c, 1);
  transpose_kernel<T><<<grid, elem::kTransposeThreads, 0, stream>>>(
      reinterpret_cast<const T*>(a.src), reinterpret_cast<T*>(a.dst), a.rows, a.cols, tiles_c,
      elem::cursor_at(grid, tiles_c), elem::transpose_wide(a.src, a.dst, a.rows, a.cols, sizeof(T)));
}

// ------------------------------------------------------------------- to_f16
// Groups of eight elements: 16-byte stores of f16 (one or two 16-byte
// loads) when both operands are 16-byte aligned, element by element
// otherwise and for the tail. Hardware conversions.
template <class S>
__global__ void __launch_bounds__(kThreads)
    to_f16_kernel(const S* __restrict__ src, uint16_t* __restrict__ dst, uint64_t n, bool wide) {
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  uint64_t scalar_from = 0;
  if (wide) {
    const uint64_t groups = n / 8;
    const elem::Vec4* in = reinterpret_cast<const elem::Vec4*>(src);
    elem::Vec4* out = reinterpret_cast<elem::Vec4*>(dst);
    for (uint64_t g = first; g < groups; g += stride) {
      if constexpr (sizeof(S) == 2) {
        out[g] = elem::to_f16_packet_bf16(elem::load16(in + g));
      } else {
        out[g] = elem::to_f16_packet_f32(elem::load16(in + 2 * g), elem::load16(in + 2 * g + 1));
      }
    }
    scalar_from = groups * 8;
  }
  constexpr KernelType kType = sizeof(S) == 2 ? KernelType::bfloat16 : KernelType::float32;
  for (uint64_t i = scalar_from + first; i < n; i += stride) dst[i] = elem::to_f16_element(src, kType, i);
}

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

// --------------------------------------------------------------- quant_int8
// One block per row (grid-stride over rows). Pass 1 loads the thread's
// slabs (16-byte loads, kept in registers) and takes max|w|; the block
// reduces with lane shuffles inside groups of 32 lanes (right for 32- and
// 64-wide wavefronts) and one shared-memory step across groups; pass 2
// writes the codes from the registers, 16 per 16-byte store.
// Residency hint: 1024 threads per SM for f32 rows (registers capped at
// 64), 1280 for f16 (51), which every target fits; without it ptxas for
// sm_120 chose 48 registers for f32 and spilled 4 bytes.
template <class S, unsigned THREADS, bool SLABS>
__global__ void __launch_bounds__(THREADS, (sizeof(S) == 2 ? 1280 : 1024) / THREADS)
    quant_int8_kernel(const S* __restrict__ src, uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                      uint64_t rows, uint64_t cols) {
  constexpr bool slabs = SLABS;
  constexpr unsigned kGroups = THREADS / 32;
  __shared__ float partial[2][kGroups];
  unsigned parity = 0;
  for (uint64_t n = blockIdx.x; n < rows; n += gridDim.x, parity ^= 1u) {
    const S* row = src + n * cols;
    elem::QuantThread<S> t;
    elem::quant_pass1<S, THREADS>(row, cols, slabs, threadIdx.x, t);
    float m = t.max_abs;
#pragma unroll
    for (unsigned lanes = 16; lanes > 0; lanes /= 2) m = fmaxf(m, vendor::shfl_xor(m, lanes));
    if (threadIdx.x % 32 == 0) partial[parity][threadIdx.x / 32] = m;
    __syncthreads();  // partial[parity] is not written again before the next row's barrier
    float row_max = partial[parity][0];
#pragma unroll
    for (unsigned g = 1; g < kGroups; ++g) row_max = fmaxf(row_max, partial[parity][g]);
    const elem::QuantScale scale = elem::quant_scale(row_max);
    if (threadIdx.x == 0) elem::store_f32_bytes(scales + 4 * n, scale.scale);
    elem::quant_pass2<S, THREADS>(row, cols, slabs, threadIdx.x, t, scale, codes + n * cols);
  }
}

template <class S>
void enqueue_quant_int8(const KernelArgs& a, vendor::Stream stream) {
  const unsigned grid = grid_for(a.rows, 1);
  const S* src = reinterpret_cast<const S*>(a.src);
  auto* codes = reinterpret_cast<uint8_t*>(a.dst);
  auto* scales = reinterpret_cast<uint8_t*>(a.dst2);
  const bool slabs = elem::quant_slabs(a.src, a.dst, a.cols);
  // Short rows would leave most of a 256-thread block idle.
  // One path per kernel (a run-time flag would keep both paths' scalar
  // state live: HIP spilled scalar registers).
  if (a.cols >= 4096) {
    if (slabs) {
      quant_int8_kernel<S, 256, true><<<grid, 256, 0, stream>>>(src, codes, scales, a.rows, a.cols);
    } else {
      quant_int8_kernel<S, 256, false><<<grid, 256, 0, stream>>>(src, codes, scales, a.rows, a.cols);
    }
  } else if (slabs) {
    quant_int8_kernel<S, 64, true><<<grid, 64, 0, stream>>>(src, codes, scales, a.rows, a.cols);
  } else {
    quant_int8_kernel<S, 64, false><<<grid, 64, 0, stream>>>(src, codes, scales, a.rows, a.cols);
  }
}

// ------------------------------------------------------------ dequant_gguf
// One thread per group of eight outputs of a row (derivation_elements.hpp,
// gguf_group), walked by a (row, group) cursor; one instantiation per block
// type and output type, so each kernel holds only its type's decoding.
template <KernelType T, class OUT>
__global__ void __launch_bounds__(kThreads)
    dequant_gguf_kernel(const uint8_t* __restrict__ src, OUT* __restrict__ dst, elem::GgufShape shape,
                        elem::Cursor stride) {
  for (elem::Cursor c = elem::cursor_at(blockIdx.x * kThreads + threadIdx.x, shape.groups_per_row); c.major < shape.rows;
       elem::cursor_step(c, stride, shape.groups_per_row))
    elem::gguf_group<T, OUT>(shape, c.major, c.minor, src, dst);
}

template <KernelType T, class OUT>
void enqueue_gguf(const KernelArgs& a, vendor::Stream stream) {
  const elem::GgufShape shape = elem::gguf_shape<T>(a.rows, a.cols, a.src, a.dst);
  const unsigned grid = grid_for(a.rows * shape.groups_per_row, kThreads);
  dequant_gguf_kernel<T, OUT><<<grid, kThreads, 0, stream>>>(reinterpret_cast<const uint8_t*>(a.src),
                                                             reinterpret_cast<OUT*>(a.dst), shape,
                                                             elem::cursor_at(grid * kThreads, shape.groups_per_row));
}

// -------------------------------------------------------- repack_gguf_int4
// One thread per Q4_0 / Q4_1 block (derivation_elements.hpp,
// q4_repack_block): blocks of all rows are one flat sequence, so a plain
// grid-stride index walks them; neighbouring threads store neighbouring
// 16-byte word packets. One instantiation per block type.
template <KernelType T>
__global__ void __launch_bounds__(kThreads)
    repack_gguf_int4_kernel(const uint8_t* __restrict__ src, uint32_t* __restrict__ words,
                            uint32_t* __restrict__ pairs, uint64_t blocks, bool wide, bool pairs_aligned) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < blocks; i += stride)
    elem::q4_repack_block<T>(src, i, words, pairs, wide, pairs_aligned);
}

template <KernelType T>
void enqueue_repack_gguf(const KernelArgs& a, vendor::Stream stream) {
  const uint64_t blocks = a.rows * (a.cols / 32);
  const unsigned grid = grid_for(blocks, kThreads);
  repack_gguf_int4_kernel<T><<<grid, kThreads, 0, stream>>>(
      reinterpret_cast<const uint8_t*>(a.src), reinterpret_cast<uint32_t*>(a.dst), reinterpret_cast<uint32_t*>(a.dst2),
      blocks, aligned(a.dst, 16), aligned(a.dst2, 4));
}

// One row per derivation kind, in the kind table's order: each returns
// false when the launch has nothing to do (no kernel enqueued).
bool run_transpose(const KernelArgs& a, vendor::Stream stream) {
  if (a.rows * a.cols == 0) return false;
  switch (a.element_bytes) {
    case 1: enqueue_transpose<uint8_t>(a, stream); break;
    case 2: enqueue_transpose<uint16_t>(a, stream); break;
    case 4: enqueue_transpose<uint32_t>(a, stream); break;
    default: enqueue_transpose<unsigned long long>(a, stream); break;
  }
  return true;
}

bool run_to_f16(const KernelArgs& a, vendor::Stream stream) {
  const uint64_t elements = a.rows * a.cols;
  if (elements == 0) return false;
  const bool wide = aligned(a.src, 16) && aligned(a.dst, 16);
  const unsigned grid = grid_for(wide ? elements / 8 + 1 : elements, kThreads);
  uint16_t* dst = reinterpret_cast<uint16_t*>(a.dst);
  if (a.src_type == KernelType::bfloat16) {
    to_f16_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(reinterpret_cast<const uint16_t*>(a.src), dst, elements, wide);
  } else {
    to_f16_kernel<float><<<grid, kThreads, 0, stream>>>(reinterpret_cast<const float*>(a.src), dst, elements, wide);
  }
  return true;
}

bool run_int4(const KernelArgs& a, vendor::Stream stream) {  // dequant_int4 and repack_int4
  if (a.rows * a.cols == 0) return false;
  if (a.src_type == KernelType::float16) {
    enqueue_int4<uint16_t>(a, stream);
  } else {
    enqueue_int4<float>(a, stream);
  }
  return true;
}

bool run_quant_int8(const KernelArgs& a, vendor::Stream stream) {
  if (a.rows == 0) return false;
  if (a.src_type == KernelType::float16) {
    enqueue_quant_int8<uint16_t>(a, stream);
  } else {
    enqueue_quant_int8<float>(a, stream);
  }
  return true;
}

bool run_gguf(const KernelArgs& a, vendor::Stream stream) {  // dequant_gguf and dequant_gguf_f32
  if (a.rows * a.cols == 0) return false;
  const bool f32 = a.kind == Derivation::dequant_gguf_f32;
  // The host side accepted only the kinds' block types; any other enqueues nothing.
  return elem::with_gguf_type(a.src_type, [&](auto type) {
    constexpr KernelType kType = decltype(type)::value;
    if (f32) {
      enqueue_gguf<kType, float>(a, stream);
    } else {
      enqueue_gguf<kType, uint16_t>(a, stream);
    }
  });
}

bool run_repack_gguf(const KernelArgs& a, vendor::Stream stream) {  // repack_gguf_int4
  if (a.rows * (a.cols / 32) == 0) return false;
  // The host side accepted only Q4_0 and Q4_1; any other enqueues nothing.
  return elem::with_q4_type(a.src_type, [&](auto type) { enqueue_repack_gguf<decltype(type)::value>(a, stream); });
}

struct EnqueueRow {
  Derivation kind;
  bool (*run)(const KernelArgs&, vendor::Stream);
};
constexpr EnqueueRow kEnqueue[] = {{Derivation::transpose, run_transpose},
                                   {Derivation::to_f16, run_to_f16},
                                   {Derivation::dequant_int4, run_int4},
                                   {Derivation::repack_int4, run_int4},
                                   {Derivation::quant_int8, run_quant_int8},
                                   {Derivation::dequant_gguf, run_gguf},
                                   {Derivation::dequant_gguf_f32, run_gguf},
                                   {Derivation::repack_gguf_int4, run_repack_gguf}};
static_assert(kinds::covers_every_kind(kEnqueue), "the CUDA/HIP kernels need one row per derivation kind");

}  // namespace

int enqueue_derivation(const KernelArgs& a, void* stream_handle) {
  const auto stream = static_cast<vendor::Stream>(stream_handle);
  // The runtime's last-error slot still holds any earlier failed call (an
  // allocation refused as out of memory, say), already reported to its
  // caller; drop it, so what is read after the launch is this launch's own.
  // (Found on an H200: a refused cudaMalloc made the next launch fail.)
  static_cast<void>(vendor::take_launch_error());
  if (!kEnqueue[static_cast<int>(a.kind)].run(a, stream)) return 0;
  return vendor::take_launch_error();
}

}  // namespace ballast::gpu
