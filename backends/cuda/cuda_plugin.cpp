// libballast-cuda.so's one exported symbol.
#include "cuda_driver_api.hpp"
#include "gpu_plugin/runtime_plugin.hpp"

#include <ballast/plugin_abi.hpp>

#include <new>

BALLAST_PLUGIN_ENTRY("cuda", new (std::nothrow) ballast::gpu::RuntimePlugin(ballast::cuda::driver_api()));
