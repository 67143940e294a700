// A backend registered by unit_capi_flow whose only work is its
// plugin-wide extension "marker": looking it up must open no device (this
// one has none). Apart from the test because plugin_api.h and ballast.h
// both declare ballast_device_info.
#include <ballast/plugin_abi.hpp>

#include <cstring>

namespace {

class WithExtension final : public ballast::BackendPlugin {
 public:
  ballast::Result<std::vector<ballast::DeviceInfo>> devices() override {
    return ballast::make_error(ballast::ErrorCode::unavailable, "no device (test plugin)");
  }
  ballast::Result<std::unique_ptr<ballast::BackendDevice>> open(const ballast::BackendConfig&) override {
    return ballast::make_error(ballast::ErrorCode::unavailable, "no device (test plugin)");
  }
  void* extension(const char* name) override { return std::strcmp(name, "marker") == 0 ? &marker : nullptr; }
  int marker = 0;
};

}  // namespace

// The marker's address, or null when the registration was refused.
const void* register_extension_plugin(const char* name) {
  static WithExtension plugin;
  return ballast::register_backend(name, plugin).ok() ? &plugin.marker : nullptr;
}
