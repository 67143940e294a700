// A plugin library that calls back into the registry for itself while it
// is being loaded: a static constructor (run inside dlopen, with the
// loader's lock for this name held) lists the backends and opens its own
// name. Both must be answered at once, not wait on the load in progress;
// the device's driver string reports what they said.
#include <ballast/plugin_abi.hpp>

#include <string>

namespace reentrant {

std::string g_said;

struct AtLoad {
  AtLoad() {
    for (const auto& b : ballast::list_backends())
      if (b.name == "reentrant") g_said += "listed as " + std::string(ballast::backend_state_name(b.state)) + "; ";
    auto self = ballast::open_backend("reentrant");
    g_said += self.ok() ? std::string("opened") : self.error().to_string();
  }
};
const AtLoad at_load;

class Plugin final : public ballast::BackendPlugin {
 public:
  ballast::Result<std::vector<ballast::DeviceInfo>> devices() override {
    ballast::DeviceInfo d;
    d.backend = "reentrant";
    d.name = "reentrant device";
    d.uuid = "GPU-0000000f-aaaa-bbbb-cccc-0123456789ab";
    d.driver = g_said;
    d.memory_bytes = 1 << 20;
    return std::vector<ballast::DeviceInfo>{d};
  }
  ballast::Result<std::unique_ptr<ballast::BackendDevice>> open(const ballast::BackendConfig&) override {
    return ballast::forward_device(ballast::open_backend("cpu?threads=1"));
  }
};

}  // namespace reentrant

BALLAST_PLUGIN_ENTRY("reentrant", new reentrant::Plugin());
