// The CUDA spelling of the few names derivation_kernels.cuh needs from its
// vendor. Everything else (__global__, __shared__, <<<>>>, vector types) is
// spelled the same by CUDA and HIP.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace ballast::gpu::vendor {

using Stream = cudaStream_t;

// Returns and clears the error of the last launch on this thread; a sticky
// error is returned again by every later call, so it cannot be lost here.
inline int take_launch_error() { return static_cast<int>(cudaGetLastError()); }

// The value of lane (this lane XOR mask) of the warp; masks < 32 only.
__device__ inline float shfl_xor(float v, unsigned mask) { return __shfl_xor_sync(0xffffffffu, v, static_cast<int>(mask)); }

}  // namespace ballast::gpu::vendor
