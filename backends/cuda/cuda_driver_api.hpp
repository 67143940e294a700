// The CUDA runtime as a gpu::DriverApi table.
#pragma once

#include "gpu_plugin/driver_api.hpp"

namespace ballast::cuda {

const gpu::DriverApi& driver_api();

}  // namespace ballast::cuda
