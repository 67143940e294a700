#include "cuda_hip/device/vendor_hip.hpp"
#include "probes.cuh"
