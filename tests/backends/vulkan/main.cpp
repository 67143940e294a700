// Runs the tests only where a Vulkan device can be opened; otherwise says
// why and exits 77 (ctest SKIP).
#define DOCTEST_CONFIG_IMPLEMENT
#include "support.hpp"

#include <cstdio>

namespace ballast::vulkan::test {

BackendConfig config(const std::string& suffix) {
  auto c = parse_backend_config("vulkan" + suffix);
  REQUIRE(c.ok());
  return *c;
}

std::unique_ptr<Checked> open(const std::string& suffix) {
  auto b = VulkanBackend::open(config(suffix));
  INFO(b.status().to_string());
  REQUIRE(b.ok());
  return std::make_unique<Checked>(std::move(*b));
}

}  // namespace ballast::vulkan::test

int main(int argc, char** argv) {
  auto config = ballast::parse_backend_config("vulkan");
  if (!config) {
    std::printf("cannot parse 'vulkan': %s\n", config.status().to_string().c_str());
    return 1;
  }
  auto probe = ballast::vulkan::VulkanBackend::open(*config);
  if (!probe && probe.code() == ballast::ErrorCode::unavailable) {
    std::printf("skipped: %s\n", probe.status().to_string().c_str());
    return 77;
  }
  probe = ballast::make_error(ballast::ErrorCode::internal, "closed");  // close before the tests open their own
  doctest::Context context(argc, argv);
  return context.run();
}
