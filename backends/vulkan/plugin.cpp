// The plugin entry point (BALLAST_PLUGIN_ENTRY: the C plugin table the
// registry reads, plugin_api.h) and the BackendPlugin behind it.
#include "backend.hpp"

#include <ballast/plugin_abi.hpp>

#include <exception>

namespace ballast::vulkan {
namespace {

class VulkanPlugin final : public BackendPlugin {
 public:
  Result<std::vector<DeviceInfo>> devices() override {
    try {
      return list_devices();
    } catch (const std::exception& e) {
      return make_error(ErrorCode::internal, std::string("vulkan: ") + e.what());
    }
  }

  Result<std::unique_ptr<BackendDevice>> open(const BackendConfig& config) override {
    try {
      auto backend = VulkanBackend::open(config);
      if (!backend) return backend.error();
      return std::unique_ptr<BackendDevice>(std::move(*backend));
    } catch (const std::exception& e) {  // std::bad_alloc from a container: never across the boundary
      return make_error(ErrorCode::internal, std::string("vulkan: ") + e.what());
    }
  }
};

}  // namespace
}  // namespace ballast::vulkan

BALLAST_PLUGIN_ENTRY("vulkan", new ballast::vulkan::VulkanPlugin());
