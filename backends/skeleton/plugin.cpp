// The skeleton's entry point (BALLAST_PLUGIN_ENTRY: the C plugin table the
// registry reads) and its BackendPlugin: which devices there are, and
// opening one with its options.
#include "skeleton/backend.hpp"

#include <ballast/plugin_abi.hpp>

#include <exception>
#include <string>

namespace ballast::skeleton {
namespace {

class SkeletonPlugin final : public BackendPlugin {
 public:
  Result<std::vector<DeviceInfo>> devices() override { return std::vector<DeviceInfo>{skeleton_device()}; }

  Result<std::unique_ptr<BackendDevice>> open(const BackendConfig& config) override {
    // The registry has checked that the device exists; options are the backend's.
    if (!config.options.empty())
      return make_error(ErrorCode::invalid_argument,
                        "unknown option '" + config.options.begin()->first + "' for the skeleton backend; it takes none");
    try {
      return std::unique_ptr<BackendDevice>(std::make_unique<SkeletonDevice>(skeleton_device()));
    } catch (const std::exception& e) {  // never across the boundary (the adapter would catch it too)
      return make_error(ErrorCode::out_of_memory, std::string("skeleton: ") + e.what());
    }
  }
};

}  // namespace
}  // namespace ballast::skeleton

BALLAST_PLUGIN_ENTRY("skeleton", new ballast::skeleton::SkeletonPlugin());
