// The slice kernel on CUDA and HIP (slice: a strided shard gathered on the
// device), written once for nvcc and hipcc, in the three parts of every
// kinds_<family>.cuh (elem::, the kernel and run_slice(), and the host
// replay_slice()).
#pragma once

#include "cuda_hip/device/derivation_elements.hpp"

namespace ballast::gpu::elem {

// ---------------------------------------------------------------- slice
// Each output row is one run of a source row, so the copy moves units of
// U bytes: the largest of 16, 8, 4, 2 and 1 that divides both addresses,
// the source row's length, the run's first byte and its length. Element
// width does not matter to a copy; a 2-byte shard whose runs are 16-byte
// aligned moves as 16-byte packets.
struct SliceUnits {
  uint64_t unit = 1;       // U
  uint64_t per_row = 0;    // units of an output row (the run)
  uint64_t src_row = 0;    // units of a source row
  uint64_t first = 0;      // the run's first unit in its source row
};

BALLAST_HD inline SliceUnits slice_units(uint64_t src, uint64_t dst, uint64_t element_bytes, uint64_t cols,
                                         uint64_t src_cols, uint64_t col_offset) {
  const uint64_t run = cols * element_bytes, stride = src_cols * element_bytes, first = col_offset * element_bytes;
  const uint64_t all = src | dst | run | stride | first;
  uint64_t u = 16;
  while (u > 1 && all % u != 0) u /= 2;
  SliceUnits s;
  s.unit = u;
  s.per_row = run / u;
  s.src_row = stride / u;
  s.first = first / u;
  return s;
}

// Output unit i comes from this source unit.
BALLAST_HD inline uint64_t slice_source_unit(const SliceUnits& s, uint64_t i) {
  const uint64_t r = i / s.per_row;
  return r * s.src_row + s.first + (i - r * s.per_row);
}

}  // namespace ballast::gpu::elem

#if BALLAST_WITH_KERNELS
namespace ballast::gpu {
namespace {

// One unit per thread, grid-stride: neighbouring threads read neighbouring
// units of a run and write neighbouring units of the output (coalesced on
// both sides but at the ends of runs).
template <class U>
__global__ void __launch_bounds__(kThreads)
    slice_kernel(const U* __restrict__ src, U* __restrict__ dst, elem::SliceUnits s, uint64_t n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    dst[i] = src[elem::slice_source_unit(s, i)];
}

template <class U>
void launch_slice(const KernelArgs& a, const elem::SliceUnits& s, uint64_t n, vendor::Stream stream) {
  slice_kernel<U><<<grid_for(n, kThreads), kThreads, 0, stream>>>(reinterpret_cast<const U*>(a.src),
                                                                   reinterpret_cast<U*>(a.dst), s, n);
}

bool run_slice(const KernelArgs& a, vendor::Stream stream) {
  const elem::SliceUnits s = elem::slice_units(a.src, a.dst, a.element_bytes, a.cols, a.src_cols, a.col_offset);
  const uint64_t n = a.rows * s.per_row;
  if (n == 0) return false;
  switch (s.unit) {
    case 16: launch_slice<elem::Vec4>(a, s, n, stream); break;
    case 8: launch_slice<uint64_t>(a, s, n, stream); break;
    case 4: launch_slice<uint32_t>(a, s, n, stream); break;
    case 2: launch_slice<uint16_t>(a, s, n, stream); break;
    default: launch_slice<uint8_t>(a, s, n, stream); break;
  }
  return true;
}

}  // namespace
}  // namespace ballast::gpu
#endif

#ifdef BALLAST_HOST_REPLAY
#include <cstring>

namespace ballast::gpu::testing {

// The kernel's walk, one "thread": the same units, the same source index.
inline void replay_slice(const KernelArgs& a) {
  const elem::SliceUnits s = elem::slice_units(a.src, a.dst, a.element_bytes, a.cols, a.src_cols, a.col_offset);
  const auto* src = reinterpret_cast<const unsigned char*>(a.src);
  auto* dst = reinterpret_cast<unsigned char*>(a.dst);
  for (uint64_t i = 0; i < a.rows * s.per_row; ++i)
    std::memcpy(dst + i * s.unit, src + elem::slice_source_unit(s, i) * s.unit, s.unit);
}

}  // namespace ballast::gpu::testing
#endif
