// The public registry functions, over the process-wide plugin search path.
#include "registry/plugin_loader.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/plugin_abi.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace ballast;

TEST_CASE("the known backends: the first-party ones in their fixed order, then every plugin file found") {
  const auto names = known_backend_names();
  REQUIRE(names.size() >= 4);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 4) ==
        std::vector<std::string>{"cpu", "cuda", "hip", "vulkan"});
  // Nothing is registered in this program but cpu (libballast's own), so
  // the rest are the plugin files of the search folders, sorted.
  auto found = registry::process_plugin_loader().discover();
  found.erase(std::remove_if(found.begin(), found.end(),
                             [](const std::string& n) { return n == "cpu" || n == "cuda" || n == "hip" || n == "vulkan"; }),
              found.end());
  CHECK(std::vector<std::string>(names.begin() + 4, names.end()) == found);
}

TEST_CASE("the CPU backend is registered: its name is taken") {
  struct Unused final : BackendPlugin {
    Result<std::vector<DeviceInfo>> devices() override { return make_error(ErrorCode::unavailable, "unused"); }
    Result<std::unique_ptr<BackendDevice>> open(const BackendConfig&) override {
      return make_error(ErrorCode::unavailable, "unused");
    }
  };
  static Unused unused;
  const Status s = register_backend("cpu", unused);
  CHECK(s.code() == ErrorCode::unsupported);
  CHECK(s.error().to_string() == "unsupported: registering backend \"cpu\": the name is already registered");
}

TEST_CASE("an unknown backend name is refused with the list of known ones") {
  auto opened = open_backend("opencl:0");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.code() == ErrorCode::invalid_argument);
  CHECK(opened.error().message == "unknown backend \"opencl\"; known backends: cpu, cuda, hip, vulkan");
}

TEST_CASE("a malformed config string is refused before anything is loaded") {
  auto opened = open_backend("cuda:");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.code() == ErrorCode::invalid_argument);
  CHECK(opened.error().message.find("\"cuda:\" at position 5") != std::string::npos);
}

TEST_CASE("the built-in CPU backend opens, twice, as independent backends") {
  auto a = open_backend("cpu");
  auto b = open_backend("cpu");
  REQUIRE_MESSAGE(a.ok(), a.status().to_string());
  REQUIRE_MESSAGE(b.ok(), b.status().to_string());
  CHECK(a->get() != b->get());
  CHECK((*a)->info().backend == "cpu");
  CHECK((*a)->info().name == (*b)->info().name);
}

TEST_CASE("the CPU backend refuses a device it does not have") {
  auto opened = open_backend("cpu:5");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.code() == ErrorCode::not_found);
  CHECK(opened.error().message.find("available devices: 0: ") != std::string::npos);
}

TEST_CASE("list_backends names every known backend with a state, and cpu is always available") {
  const auto listing = list_backends();
  const auto known = known_backend_names();
  REQUIRE(listing.size() == known.size());
  for (std::size_t i = 0; i < listing.size(); ++i) {
    CAPTURE(listing[i].name);
    CHECK(listing[i].name == known[i]);
    CHECK_FALSE(backend_state_name(listing[i].state).empty());
    const bool available = listing[i].state == BackendListing::State::available;
    // Found (a plugin file not loaded by a plain listing) has no reason either.
    const bool found = listing[i].state == BackendListing::State::found;
    CHECK((available || found) == listing[i].reason.empty());
    if (found) CHECK_FALSE(listing[i].library.empty());
    if (available) CHECK_FALSE(listing[i].devices.empty());
    if (listing[i].state == BackendListing::State::not_found) CHECK_FALSE(listing[i].searched.empty());
  }
  CHECK(listing[0].state == BackendListing::State::available);
  CHECK(listing[0].library == "built in");
}

TEST_CASE("the core names its plugin ABI, not a build fingerprint") {
  // Plugins are checked by ABI version alone (plugin_api.h): the core built
  // by one compiler loads plugins built by another.
  CHECK(BALLAST_PLUGIN_API_MAJOR == 1);
  CHECK(BALLAST_PLUGIN_API_MINOR >= 1);
}
