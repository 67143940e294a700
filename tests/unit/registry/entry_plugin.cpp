// A plugin library whose entry point is BALLAST_PLUGIN_ENTRY, as every
// real plugin's is, built once per kind of factory (see CMakeLists.txt):
//   ENTRY_FACTORY=expression  a `new` expression
//   ENTRY_FACTORY=function    a function returning the plugin
//   ENTRY_FACTORY=lambda      a lambda returning the plugin
//   ENTRY_FACTORY=throws      a function that throws
//   ENTRY_FACTORY=null        a null pointer
// ENTRY_NAME is the backend name (and the library's libballast-<name>.so).
#include <ballast/plugin_abi.hpp>

#include <stdexcept>

namespace entry {

class Plugin final : public ballast::BackendPlugin {
 public:
  ballast::Result<std::vector<ballast::DeviceInfo>> devices() override {
    ballast::DeviceInfo d;
    d.backend = ENTRY_NAME;
    d.index = 0;
    d.name = "entry-macro device";
    d.uuid = "GPU-0000000e-aaaa-bbbb-cccc-0123456789ab";
    d.memory_bytes = 1 << 20;
    return std::vector<ballast::DeviceInfo>{d};
  }
  // Opens the built-in CPU backend: this plugin has no device of its own.
  ballast::Result<std::unique_ptr<ballast::BackendDevice>> open(const ballast::BackendConfig&) override {
    return ballast::forward_device(ballast::open_backend("cpu?threads=1"));
  }
};

[[maybe_unused]] ballast::BackendPlugin* make() { return new Plugin(); }
[[maybe_unused]] ballast::BackendPlugin* make_throws() { throw std::runtime_error("factory throws"); }

}  // namespace entry

#define ENTRY_expression new entry::Plugin()
#define ENTRY_function &entry::make
#define ENTRY_lambda [] { return new entry::Plugin(); }
#define ENTRY_throws entry::make_throws
#define ENTRY_null nullptr
#define ENTRY_PICK2_(kind) ENTRY_##kind
#define ENTRY_PICK_(kind) ENTRY_PICK2_(kind)

BALLAST_PLUGIN_ENTRY(ENTRY_NAME, ENTRY_PICK_(ENTRY_FACTORY));
