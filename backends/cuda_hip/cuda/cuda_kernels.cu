// The CUDA build of the shared derivation kernels.
#include "cuda_hip/device/vendor_cuda.hpp"
// The vendor header must come first.
#include "cuda_hip/device/derivation_kernels.cuh"
