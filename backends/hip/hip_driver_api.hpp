// The HIP runtime as a gpu::DriverApi table.
#pragma once

#include "gpu_plugin/driver_api.hpp"

namespace ballast::hip {

const gpu::DriverApi& driver_api();

}  // namespace ballast::hip
