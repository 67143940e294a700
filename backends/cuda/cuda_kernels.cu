// The CUDA build of the shared derivation kernels.
#include "gpu/vendor_cuda.hpp"
// The vendor header must come first.
#include "gpu/derivation_kernels.cuh"
