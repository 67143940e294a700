// A built CUDA/HIP plugin loads on this machine, whatever its drivers, and
// is honest about them: either it lists devices that open, or it is
// `unavailable` with a reason that names what is missing and the vendor's
// error name. Read as the registry reads it: the C plugin table first
// (plugin_api.h), then the backend through register_backend.
#include <ballast/plugin_abi.hpp>

#include <doctest/doctest.h>
#include <dlfcn.h>

#include <string>

TEST_CASE("the " GPU_PLUGIN_NAME " plugin loads and reports its devices or why it has none") {
  void* library = dlopen(GPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE_MESSAGE(library != nullptr, dlerror());
  auto entry = reinterpret_cast<ballast_plugin_entry_fn>(dlsym(library, BALLAST_PLUGIN_ENTRY_SYMBOL));
  const bool exported = entry != nullptr;
  REQUIRE(exported);
  CHECK(dlsym(library, "ballast_plugin_descriptor") == nullptr);  // the C++ ABI's symbol is gone
  const ballast_plugin* table = entry();
  REQUIRE(table != nullptr);
  CHECK(std::string(table->name) == GPU_PLUGIN_NAME);
  CHECK(table->api_major == BALLAST_PLUGIN_API_MAJOR);
  CHECK(table->api_minor == BALLAST_PLUGIN_API_MINOR);
  CHECK(table->struct_size == sizeof(ballast_plugin));

  // Registered under its own name: the registry's checks and wrappers,
  // without searching for the file again.
  REQUIRE(ballast::register_backend(GPU_PLUGIN_NAME, *table).ok());
  const auto listing = ballast::list_backends(ballast::ListOptions{.load = {GPU_PLUGIN_NAME}});
  const ballast::BackendListing* mine = nullptr;
  for (const auto& l : listing)
    if (l.name == GPU_PLUGIN_NAME) mine = &l;
  REQUIRE(mine != nullptr);
  auto backend = ballast::open_backend(GPU_PLUGIN_NAME);
  if (mine->state != ballast::BackendListing::State::available) {
    MESSAGE("unavailable here: " << mine->reason);
    CHECK(mine->state == ballast::BackendListing::State::unavailable);
    CHECK(mine->reason.find("unavailable") != std::string::npos);
    // Opening fails the same way instead of crashing or picking another backend.
    REQUIRE_FALSE(backend.ok());
    CHECK(backend.error().code == ballast::ErrorCode::unavailable);
    CHECK_FALSE(backend.error().native.empty());
    CHECK(backend.error().message.find(backend.error().native) != std::string::npos);
  } else {
    REQUIRE_FALSE(mine->devices.empty());
    for (const ballast::DeviceInfo& info : mine->devices) {
      CHECK(info.backend == GPU_PLUGIN_NAME);
      CHECK(info.uuid.rfind("GPU-", 0) == 0);
      CHECK(info.memory_bytes > 0);
    }
    REQUIRE_MESSAGE(backend.ok(), backend.error().to_string());
    CHECK((*backend)->info().name == mine->devices.front().name);
  }
  CHECK_FALSE(ballast::open_backend(GPU_PLUGIN_NAME "?no_such_option=1").ok());
  // The registry never unloads plugins; neither does this test.
}
