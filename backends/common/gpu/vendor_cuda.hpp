// The CUDA spelling of the few names derivation_kernels.cuh needs from its
// vendor. Everything else (__global__, __shared__, <<<>>>, vector types) is
// spelled the same by CUDA and HIP.
#pragma once

#include <cuda_runtime.h>

namespace ballast::gpu::vendor {

using Stream = cudaStream_t;

// Returns and clears the error of the last launch on this thread; a sticky
// error is returned again by every later call, so it cannot be lost here.
inline int take_launch_error() { return static_cast<int>(cudaGetLastError()); }

}  // namespace ballast::gpu::vendor
