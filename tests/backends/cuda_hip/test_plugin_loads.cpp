// A built CUDA/HIP plugin loads on this machine, whatever its drivers, and
// is honest about them: either it lists devices that open, or it is
// `unavailable` with a reason that names what is missing and the vendor's
// error name.
#include <ballast/plugin_abi.hpp>

#include <doctest/doctest.h>
#include <dlfcn.h>

#include <string>

TEST_CASE("the " GPU_PLUGIN_NAME " plugin loads and reports its devices or why it has none") {
  void* library = dlopen(GPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(library != nullptr, dlerror());
  using Entry = const BallastPluginDescriptor* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(library, "ballast_plugin_descriptor"));
  const bool exported = entry != nullptr;
  REQUIRE(exported);
  const BallastPluginDescriptor* d = entry();
  REQUIRE(d != nullptr);
  CHECK(std::string(d->name) == GPU_PLUGIN_NAME);
  CHECK(d->abi_version == BALLAST_PLUGIN_ABI_VERSION);
  CHECK(std::string(d->fingerprint) == ballast::plugin_detail::kFingerprint);

  ballast::BackendPlugin* plugin = d->create();
  REQUIRE(plugin != nullptr);
  auto devices = plugin->devices();
  ballast::BackendConfig config;
  config.name = GPU_PLUGIN_NAME;
  auto backend = plugin->open(config);
  if (!devices) {
    const ballast::Error& e = devices.error();
    MESSAGE("unavailable here: " << e.to_string());
    CHECK(e.code == ballast::ErrorCode::unavailable);
    CHECK_FALSE(e.native.empty());
    CHECK(e.message.find(e.native) != std::string::npos);
    // Opening fails the same way instead of crashing or picking another backend.
    REQUIRE_FALSE(backend.ok());
    CHECK(backend.error().code == ballast::ErrorCode::unavailable);
  } else {
    REQUIRE_FALSE(devices->empty());
    for (const ballast::DeviceInfo& info : *devices) {
      CHECK(info.backend == GPU_PLUGIN_NAME);
      CHECK(info.uuid.rfind("GPU-", 0) == 0);
      CHECK(info.memory_bytes > 0);
    }
    REQUIRE_MESSAGE(backend.ok(), backend.error().to_string());
    CHECK((*backend)->info().name == devices->front().name);
  }
  config.options["no_such_option"] = "1";
  CHECK_FALSE(plugin->open(config).ok());
  // The registry never unloads plugins; neither does this test.
}
