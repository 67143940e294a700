// libballast-hip.so's one exported symbol.
#include "hip_driver_api.hpp"
#include "gpu_plugin/runtime_plugin.hpp"

#include <ballast/plugin_abi.hpp>

#include <new>

namespace {

ballast::BackendPlugin* create() { return new (std::nothrow) ballast::gpu::RuntimePlugin(ballast::hip::driver_api()); }

}  // namespace

extern "C" __attribute__((visibility("default"))) const BallastPluginDescriptor* ballast_plugin_descriptor() {
  static const BallastPluginDescriptor descriptor{BALLAST_PLUGIN_ABI_VERSION, ballast::plugin_detail::kFingerprint, "hip",
                                                  &create};
  return &descriptor;
}
