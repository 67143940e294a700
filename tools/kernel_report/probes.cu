#include "gpu/vendor_cuda.hpp"
#include "probes.cuh"
