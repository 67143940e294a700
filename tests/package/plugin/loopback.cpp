// libballast-loopback.so: the smallest out-of-tree backend plugin. The
// backend "loopback" is the built-in CPU backend under another name:
// devices() and open() go through the public registry to "cpu", so the
// plugin needs no GpuBackend of its own (docs/plugins.md walks through it).
#include <ballast/plugin_abi.hpp>

#include <exception>
#include <string>

#ifdef LOOPBACK_UNDEFINED
extern "C" int loopback_nowhere(void);
#endif

namespace loopback {

// The CPU config string for a loopback one: same device, same options.
std::string cpu_config(const ballast::BackendConfig& config) {
  std::string text = "cpu";
  if (config.device_uuid) {
    text += ":" + *config.device_uuid;
  } else if (config.device_index) {
    text += ":" + std::to_string(*config.device_index);
  }
  char separator = '?';
  for (const auto& [key, value] : config.options) {
    text += separator + key + "=" + value;
    separator = '&';
  }
  return text;
}

ballast::Error failed(const std::exception& e) {
  return ballast::make_error(ballast::ErrorCode::internal, std::string("loopback: ") + e.what());
}

// No exception may leave a plugin: each entry point catches and returns
// an error instead.
class Plugin final : public ballast::BackendPlugin {
 public:
  ballast::Result<std::vector<ballast::DeviceInfo>> devices() override {
#ifdef LOOPBACK_UNDEFINED  // package_test.sh: a symbol nothing provides must fail the build
    if (loopback_nowhere() != 0) return ballast::make_error(ballast::ErrorCode::internal, "unreachable");
#endif
    try {
      // The device an opened CPU backend reports (not list_backends(), which
      // lists loopback too and would come back here).
      auto cpu = ballast::open_backend("cpu?threads=1");
      if (!cpu.ok()) return cpu.error();
      ballast::DeviceInfo info = (*cpu)->info();
      info.backend = "loopback";
      return std::vector<ballast::DeviceInfo>{info};
    } catch (const std::exception& e) {
      return failed(e);
    }
  }

  ballast::Result<std::unique_ptr<ballast::BackendDevice>> open(const ballast::BackendConfig& config) override {
    try {
      // The CPU backend, opened through the public API, behind this
      // plugin's tables (forward_device: its pointers are the cookies).
      return ballast::forward_device(ballast::open_backend(cpu_config(config)));
    } catch (const std::exception& e) {
      return failed(e);
    }
  }
};

}  // namespace loopback

BALLAST_PLUGIN_ENTRY("loopback", new loopback::Plugin());
