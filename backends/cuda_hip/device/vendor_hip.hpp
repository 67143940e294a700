// The HIP spelling of the few names derivation_kernels.cuh needs from its
// vendor (see vendor_cuda.hpp).
#pragma once

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

namespace ballast::gpu::vendor {

using Stream = hipStream_t;

inline int take_launch_error() { return static_cast<int>(hipGetLastError()); }

// The value of lane (this lane XOR mask) of the wavefront; masks < 32 only,
// so the exchange stays inside a group of 32 lanes on 64-wide wavefronts.
__device__ inline float shfl_xor(float v, unsigned mask) { return __shfl_xor(v, static_cast<int>(mask)); }

}  // namespace ballast::gpu::vendor
