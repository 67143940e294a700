// The core's checks of a plugin's C tables (core/backend/plugin_tables.cpp):
// a backend table missing any required entry, its info or its capabilities
// is refused (and destroyed), and a plugin table is checked against the
// name it was loaded under only when one is expected.
#include "backend/plugin_tables.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace ballast;

namespace {

int g_destroyed = 0;

ballast_device_info g_info{};
ballast_capabilities g_caps{};

// Every required entry set; none is ever called by these tests but destroy.
ballast_backend complete_backend() {
  ballast_backend t{};
  t.struct_size = sizeof t;
  t.info = &g_info;
  t.capabilities = &g_caps;
  t.destroy = [](void*) { ++g_destroyed; };
  t.allocate = [](void*, uint64_t, uint64_t, uint64_t*, uint64_t*, ballast_error*) -> int32_t { return 0; };
  t.free = [](void*, uint64_t, uint64_t, uint64_t, ballast_error*) -> int32_t { return 0; };
  t.copy_to_device = [](void*, const ballast_operand*, const void*, uint64_t, ballast_error*) -> int32_t { return 0; };
  t.copy_to_host = [](void*, void*, const ballast_operand*, uint64_t, ballast_error*) -> int32_t { return 0; };
  t.copy_device = [](void*, const ballast_operand*, const ballast_operand*, uint64_t, ballast_error*) -> int32_t {
    return 0;
  };
  t.register_host = [](void*, const void*, uint64_t, int32_t, uint64_t*, uint64_t*, ballast_error*) -> int32_t {
    return 0;
  };
  t.unregister_host = [](void*, uint64_t, uint64_t, uint64_t, int32_t, ballast_error*) -> int32_t { return 0; };
  t.launch = [](void*, const ballast_launch*, ballast_error*) -> int32_t { return 0; };
  t.synchronize = [](void*, ballast_error*) -> int32_t { return 0; };
  return t;
}

ballast_plugin plugin_named(const char* name) {
  ballast_plugin p{};
  p.struct_size = sizeof p;
  p.api_major = BALLAST_PLUGIN_API_MAJOR;
  p.api_minor = BALLAST_PLUGIN_API_MINOR;
  p.name = name;
  p.devices = [](void*, void (*)(void*, const ballast_device_info*), void*, ballast_error*) -> int32_t { return 0; };
  p.open = [](void*, const ballast_backend_config*, const ballast_backend**, ballast_error*) -> int32_t { return 0; };
  return p;
}

}  // namespace

TEST_CASE("a backend table without its info or its capabilities is refused, and destroyed") {
  for (int missing : {0, 1}) {
    CAPTURE(missing);
    ballast_backend t = complete_backend();
    if (missing == 0) t.info = nullptr;
    else t.capabilities = nullptr;
    g_destroyed = 0;
    auto adopted = detail::adopt_backend_table(&t);
    REQUIRE_FALSE(adopted.ok());
    CHECK(adopted.error().code == ErrorCode::abi_mismatch);
    CHECK(adopted.error().message.find("lacks a required function, its info or its capabilities") != std::string::npos);
    CHECK(g_destroyed == 1);
  }
  // The complete table is adopted, and destroyed with its backend.
  const ballast_backend t = complete_backend();
  g_destroyed = 0;
  {
    auto adopted = detail::adopt_backend_table(&t);
    REQUIRE_MESSAGE(adopted.ok(), adopted.error().to_string());
    CHECK(g_destroyed == 0);
  }
  CHECK(g_destroyed == 1);
}

TEST_CASE("a plugin table's name is checked against the expected one only when one is expected") {
  const ballast_plugin p = plugin_named("fakeone");
  auto any = detail::PluginTable::check(&p, "");
  REQUIRE_MESSAGE(any.ok(), any.error().to_string());
  CHECK((*any)->name() == "fakeone");
  auto same = detail::PluginTable::check(&p, "fakeone");
  CHECK(same.ok());
  auto other = detail::PluginTable::check(&p, "vulkan");
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().code == ErrorCode::abi_mismatch);
  CHECK(other.error().message.find("plugin names itself \"fakeone\", expected \"vulkan\"") != std::string::npos);
}
