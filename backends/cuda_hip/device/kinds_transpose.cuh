// The transpose kernels on CUDA and HIP (transpose), written once
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

}  // namespace ballast::gpu::elem

#if BALLAST_WITH_KERNELS
namespace ballast::gpu {
namespace {

// ---------------------------------------------------------------- transpose
// The elem:: part above has the tile geometry and the per-thread phases.
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

}  // namespace
}  // namespace ballast::gpu
#endif

#ifdef BALLAST_HOST_REPLAY
#include <vector>

namespace ballast::gpu::testing {

template <class T>
void transpose_on_host(const KernelArgs& a) {
  using G = elem::TransposeGeometry<sizeof(T)>;
  const auto* src = reinterpret_cast<const T*>(a.src);
  auto* dst = reinterpret_cast<T*>(a.dst);
  const bool wide = elem::transpose_wide(a.src, a.dst, a.rows, a.cols, sizeof(T));
  std::vector<elem::Vec4> tile(G::kPackets);
  for (std::uint64_t r0 = 0; r0 < a.rows; r0 += G::TS) {
    for (std::uint64_t c0 = 0; c0 < a.cols; c0 += G::TS) {
      const bool fast = wide && r0 + G::TS <= a.rows && c0 + G::TS <= a.cols;
      for (unsigned t = 0; t < elem::kTransposeThreads; ++t) {
        if (fast) {
          elem::transpose_fast_load(src, a.cols, r0, c0, t, tile.data());
        } else {
          elem::transpose_edge_load(src, a.rows, a.cols, r0, c0, t, tile.data());
        }
      }
      for (unsigned t = 0; t < elem::kTransposeThreads; ++t) {
        if (fast) {
          elem::transpose_fast_store(dst, a.rows, r0, c0, t, tile.data());
        } else {
          elem::transpose_edge_store(dst, a.rows, a.cols, r0, c0, t, tile.data());
        }
      }
    }
  }
}

inline void replay_transpose(const KernelArgs& a) {
  switch (a.element_bytes) {
    case 1: transpose_on_host<std::uint8_t>(a); break;
    case 2: transpose_on_host<std::uint16_t>(a); break;
    case 4: transpose_on_host<std::uint32_t>(a); break;
    default: transpose_on_host<std::uint64_t>(a); break;
  }
}

}  // namespace ballast::gpu::testing
#endif
