// The ABI-compatibility plugins of tests/abi as the registry loads them
// (BALLAST_PLUGIN_PATH names their folders): each opens and works, and the
// extension hook (get_proc_address, added in ABI 1.1) is there for a 1.1
// plugin and absent, not garbage, for the 1.0 one.
#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

std::unique_ptr<ballast::GpuBackend> open(const char* config) {
  auto b = ballast::open_backend(config);
  REQUIRE_MESSAGE(b.ok(), b.error().to_string());
  return std::move(*b);
}

// One allocation written and read back: the tables carry data both ways.
void round_trip(ballast::GpuBackend& b) {
  const std::vector<std::byte> data{std::byte{1}, std::byte{2}, std::byte{3}};
  auto p = b.allocate(data.size());
  REQUIRE(p.ok());
  REQUIRE(b.copy_to_device(*p, 0, data).ok());
  std::vector<std::byte> back(data.size());
  REQUIRE(b.copy_to_host(back, *p, 0).ok());
  CHECK(back == data);
  CHECK(b.free(*p).ok());
}

}  // namespace

TEST_CASE("a plugin built as ABI 1.0 loads, works, and has no extension hook") {
  auto b = open("cpu_abi10?threads=1");
  CHECK(b->info().backend == "cpu_abi10");
  round_trip(*b);
  CHECK(b->extension("ballast_cpu_kernel_set") == nullptr);
}

TEST_CASE("the built-in CPU backend (ABI 1.1) answers its extension") {
  auto b = open("cpu?threads=1");
  const void* set = b->extension("ballast_cpu_kernel_set");
  REQUIRE(set != nullptr);
  CHECK(std::strlen(static_cast<const char*>(set)) > 0);
  CHECK(b->extension("no_such_extension") == nullptr);
}

#if ABI_HAVE_CLANG
TEST_CASE("a plugin built by clang loads into a core built by another compiler and works") {
  auto b = open("cpu_clang?threads=1");
  CHECK(b->info().backend == "cpu_clang");
  round_trip(*b);
  CHECK(b->extension("ballast_cpu_kernel_set") != nullptr);
  // Errors cross as code and text: an unknown option names the known keys.
  auto bad = ballast::open_backend("cpu_clang?colour=blue");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.code() == ballast::ErrorCode::invalid_argument);
  CHECK(bad.error().message.find("known keys: threads, simd") != std::string::npos);
}
#endif
