// The HIP spelling of the few names derivation_kernels.cuh needs from its
// vendor (see vendor_cuda.hpp).
#pragma once

#include <hip/hip_runtime.h>

namespace ballast::gpu::vendor {

using Stream = hipStream_t;

inline int take_launch_error() { return static_cast<int>(hipGetLastError()); }

}  // namespace ballast::gpu::vendor
