// The HIP build of the shared derivation kernels.
#include "gpu/vendor_hip.hpp"
// The vendor header must come first.
#include "gpu/derivation_kernels.cuh"
