// The HIP runtime as a gpu::RuntimeApi table.
#pragma once

#include "cuda_hip/host/runtime_api.hpp"

namespace ballast::hip {

const gpu::RuntimeApi& runtime_api();

}  // namespace ballast::hip
