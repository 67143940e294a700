// libballast-hip.so's one exported symbol.
#include "hip_runtime_api.hpp"
#include "cuda_hip/host/plugin.hpp"

#include <ballast/plugin_abi.hpp>

#include <new>

BALLAST_PLUGIN_ENTRY("hip", new (std::nothrow) ballast::gpu::RuntimePlugin(ballast::hip::runtime_api()));
