#include "conformance/conformance.hpp"

#include <ballast/backend_registry.hpp>

#include <cctype>
#include <string>

using namespace conformance;

namespace {

bool is_uuid(const std::string& s) {
  if (s.size() != 40 || s.compare(0, 4, "GPU-") != 0) return false;
  for (std::size_t i = 4; i < s.size(); ++i) {
    const bool dash = i == 12 || i == 17 || i == 22 || i == 27;
    if (dash ? s[i] != '-' : std::isxdigit(static_cast<unsigned char>(s[i])) == 0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("device info: identity, memory and capabilities are consistent") {
  const auto& info = gpu().info();
  const auto& caps = gpu().capabilities();
  const auto config = ballast::parse_backend_config(backend_config());
  REQUIRE(config.ok());

  CHECK(info.backend == config->name);
  CHECK_FALSE(info.name.empty());
  CHECK_MESSAGE(is_uuid(info.uuid), "uuid \"" << info.uuid << "\" is not GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
  CHECK_MESSAGE(!info.driver.empty(), "the device reports no driver version (bug reports need it)");
  CHECK(info.memory_bytes > 0);
  CHECK(info.index >= 0);
  if (config->device_index) CHECK(info.index == *config->device_index);

  CHECK(caps.max_single_allocation > 0);
  CHECK(caps.import_alignment >= 1);
  CHECK((caps.import_alignment & (caps.import_alignment - 1)) == 0);
  if (!caps.host_registration) {
    CHECK_FALSE(caps.read_only_registration);
    CHECK_MESSAGE(!caps.host_registration_note.empty(), "a backend without host registration must say why");
  }

  // The same device as the registry lists it.
  ballast::ListOptions load_this;
  load_this.load = {info.backend};
  for (const auto& listing : ballast::list_backends(load_this)) {
    if (listing.name != info.backend) continue;
    REQUIRE(listing.state == ballast::BackendListing::State::available);
    REQUIRE(static_cast<std::size_t>(info.index) < listing.devices.size());
    const auto& listed = listing.devices[static_cast<std::size_t>(info.index)];
    CHECK(listed.index == info.index);
    CHECK(listed.name == info.name);
    CHECK(listed.uuid == info.uuid);
    CHECK(listed.driver == info.driver);
    CHECK(listed.memory_bytes == info.memory_bytes);
  }
}
