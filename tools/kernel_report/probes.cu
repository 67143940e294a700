#include "cuda_hip/device/vendor_cuda.hpp"
#include "probes.cuh"
