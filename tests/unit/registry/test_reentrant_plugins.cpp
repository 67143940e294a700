// Plugins that call back into the registry for their own backend: from
// devices() (list_backends() lists the plugin itself), from open()
// (open_backend of its own name), and while being loaded (a static
// constructor). Each would come straight back into the same call (a stack
// overflow) or wait on its own load (a hang); the nested call is refused
// as `unsupported` saying why, and the outer one goes on.
#include "support/text.hpp"
#include <ballast/backend_registry.hpp>
#include <ballast/plugin_abi.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <string>

using namespace ballast;

namespace {

using ballast::testing::contains;

// devices() lists the backends, or open() opens its own name, and keeps
// what the nested call answered.
class CallsBack final : public BackendPlugin {
 public:
  enum class From { devices, open };
  CallsBack(std::string name, From from) : name_(std::move(name)), from_(from) {}

  Result<std::vector<DeviceInfo>> devices() override {
    // Once: later listings (other tests') then see a plain plugin.
    if (from_ == From::devices && !called_back_.exchange(true)) {
      for (const auto& b : list_backends())
        if (b.name == name_) nested = std::string(backend_state_name(b.state)) + ": " + b.reason;
    }
    DeviceInfo d;
    d.backend = name_;
    d.name = name_ + " device";
    d.uuid = "GPU-0000000c-aaaa-bbbb-cccc-0123456789ab";
    d.memory_bytes = 1 << 20;
    return std::vector<DeviceInfo>{d};
  }

  Result<std::unique_ptr<BackendDevice>> open(const BackendConfig&) override {
    if (from_ == From::open && !called_back_.exchange(true)) {
      auto again = open_backend(name_);
      nested = again.ok() ? "opened" : again.error().to_string();
    }
    return forward_device(open_backend("cpu?threads=1"));
  }

  std::string nested;

 private:
  std::string name_;
  From from_;
  std::atomic<bool> called_back_{false};
};

}  // namespace

TEST_CASE("a plugin whose devices() lists the backends sees itself refused, and is opened") {
  static CallsBack plugin("calls_back_devices", CallsBack::From::devices);
  REQUIRE(register_backend("calls_back_devices", plugin).ok());
  auto opened = open_backend("calls_back_devices");
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CAPTURE(plugin.nested);
  CHECK(contains(plugin.nested, "unsupported"));
  CHECK(contains(plugin.nested, "its plugin's devices() called back into the registry for \"calls_back_devices\""));
}

TEST_CASE("a plugin whose open() opens its own backend gets an error, and is opened") {
  static CallsBack plugin("calls_back_open", CallsBack::From::open);
  REQUIRE(register_backend("calls_back_open", plugin).ok());
  auto opened = open_backend("calls_back_open");
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CAPTURE(plugin.nested);
  CHECK(contains(plugin.nested, "unsupported: opening backend \"calls_back_open\""));
  CHECK(contains(plugin.nested, "its plugin's open() called back into the registry"));
}

TEST_CASE("a plugin file that lists and opens itself while being loaded is answered, not waited on") {
  set_plugin_search_path({std::string(FAKE_PLUGIN_ROOT) + "/reentrant"});
  auto opened = open_backend("reentrant");
  const auto listing = list_backends();
  set_plugin_search_path({});
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  std::string said;
  for (const auto& b : listing)
    if (b.name == "reentrant" && !b.devices.empty()) said = b.devices[0].driver;
  CAPTURE(said);
  // Its own load under way: listed as found (not loaded), and opening it refused.
  CHECK(contains(said, "listed as found; "));
  CHECK(contains(said,
                 "unsupported: opening backend \"reentrant\": the plugin for backend \"reentrant\" called back "
                 "into the registry for itself while it was being loaded"));
}
