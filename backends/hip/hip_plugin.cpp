// libballast-hip.so's one exported symbol.
#include "hip_driver_api.hpp"
#include "gpu_plugin/runtime_plugin.hpp"

#include <ballast/plugin_abi.hpp>

#include <new>

BALLAST_PLUGIN_ENTRY("hip", new (std::nothrow) ballast::gpu::RuntimePlugin(ballast::hip::driver_api()));
