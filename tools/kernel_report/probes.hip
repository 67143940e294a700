#include "gpu/vendor_hip.hpp"
#include "probes.cuh"
