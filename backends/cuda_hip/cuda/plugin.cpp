// libballast-cuda.so's one exported symbol.
#include "cuda_runtime_api.hpp"
#include "cuda_hip/host/plugin.hpp"

#include <ballast/plugin_abi.hpp>

#include <new>

BALLAST_PLUGIN_ENTRY("cuda", new (std::nothrow) ballast::gpu::RuntimePlugin(ballast::cuda::runtime_api()));
