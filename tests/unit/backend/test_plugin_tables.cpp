// The core's checks of a plugin's C tables (core/backend/plugin_tables.cpp):
// a backend table missing any required entry, its info or its capabilities
// is refused (and destroyed), and a plugin table is checked against the
// name it was loaded under only when one is expected; a launch of a kind
// past the table's kind_count (9 without the field) never reaches it.
#include "backend/plugin_tables.hpp"

#include <ballast/gpu_backend.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <utility>

using namespace ballast;

namespace {

int g_destroyed = 0;

ballast_device_info g_info{sizeof(ballast_device_info)};
ballast_capabilities g_caps{sizeof(ballast_capabilities)};

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
  t.kind_count = 10;  // the kinds of ABI 1.2
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

TEST_CASE("a backend table without any one required entry, its info or its capabilities is refused, and destroyed") {
  // Each entry on its own: a check that joins two of them wrongly accepts
  // a table missing one.
  const std::pair<const char*, void (*)(ballast_backend&)> entries[] = {
      {"info", [](ballast_backend& t) { t.info = nullptr; }},
      {"capabilities", [](ballast_backend& t) { t.capabilities = nullptr; }},
      {"destroy", [](ballast_backend& t) { t.destroy = nullptr; }},
      {"allocate", [](ballast_backend& t) { t.allocate = nullptr; }},
      {"free", [](ballast_backend& t) { t.free = nullptr; }},
      {"copy_to_device", [](ballast_backend& t) { t.copy_to_device = nullptr; }},
      {"copy_to_host", [](ballast_backend& t) { t.copy_to_host = nullptr; }},
      {"copy_device", [](ballast_backend& t) { t.copy_device = nullptr; }},
      {"register_host", [](ballast_backend& t) { t.register_host = nullptr; }},
      {"unregister_host", [](ballast_backend& t) { t.unregister_host = nullptr; }},
      {"launch", [](ballast_backend& t) { t.launch = nullptr; }},
      {"synchronize", [](ballast_backend& t) { t.synchronize = nullptr; }},
  };
  for (const auto& [name, clear] : entries) {
    CAPTURE(name);
    ballast_backend t = complete_backend();
    clear(t);
    g_destroyed = 0;
    auto adopted = detail::adopt_backend_table(&t);
    REQUIRE_FALSE(adopted.ok());
    CHECK(adopted.error().code == ErrorCode::abi_mismatch);
    CHECK_MESSAGE(
        adopted.error().message == "the backend table lacks a required entry: " + std::string(name) + " (NULL)",
        adopted.error().message);
    CHECK(g_destroyed == (t.destroy != nullptr ? 1 : 0));  // destroyed where it can be
  }
  {  // Several missing: all named, in the table's order.
    ballast_backend t = complete_backend();
    t.free = nullptr;
    t.capabilities = nullptr;
    auto adopted = detail::adopt_backend_table(&t);
    REQUIRE_FALSE(adopted.ok());
    CHECK(adopted.error().message.find("lacks a required entry: free, capabilities (NULL)") != std::string::npos);
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

TEST_CASE("a backend table whose info or capabilities are smaller than ABI 1.0's is refused, and destroyed") {
  // Every field of both structs is ABI 1.0's; a struct_size of 0 read as
  // "no fields" made a nameless device of index 0.
  const auto refused = [](const ballast_backend& t, const std::string& says) {
    g_destroyed = 0;
    auto adopted = detail::adopt_backend_table(&t);
    REQUIRE_FALSE(adopted.ok());
    CHECK(adopted.error().code == ErrorCode::abi_mismatch);
    CHECK_MESSAGE(adopted.error().message == says, adopted.error().message);
    CHECK(g_destroyed == 1);
  };
  const auto smaller = [](std::size_t size, const char* what, std::size_t least) {
    return std::to_string(size) + "-byte " + what + " (struct_size), smaller than ABI 1.0's (" + std::to_string(least) +
           ")";
  };
  for (const std::size_t size : {std::size_t{0}, sizeof(ballast_device_info) - 1}) {
    CAPTURE(size);
    ballast_device_info info{};
    info.struct_size = size;
    ballast_backend t = complete_backend();
    t.info = &info;
    refused(t, "the backend table's info is a " + smaller(size, "ballast_device_info", sizeof info));
  }
  for (const std::size_t size : {std::size_t{0}, sizeof(ballast_capabilities) - 1}) {
    CAPTURE(size);
    ballast_capabilities caps{};
    caps.struct_size = size;
    ballast_backend t = complete_backend();
    t.capabilities = &caps;
    refused(t, "the backend table's capabilities are a " + smaller(size, "ballast_capabilities", sizeof caps));
  }
}

// Each flag of the C capabilities reaches Capabilities as itself: set
// alone, it is the one true flag (a flag read inverted, or into another
// field, fails its own row).
TEST_CASE("each capability flag of a backend table is read as itself") {
  using Flag = std::uint8_t ballast_capabilities::*;
  using Read = bool Capabilities::*;
  const std::pair<Flag, Read> flags[] = {
      {&ballast_capabilities::host_registration, &Capabilities::host_registration},
      {&ballast_capabilities::read_only_registration, &Capabilities::read_only_registration},
      {&ballast_capabilities::flushes_f16_subnormals, &Capabilities::flushes_f16_subnormals},
      {&ballast_capabilities::int8_codes_within_one, &Capabilities::int8_codes_within_one},
      {&ballast_capabilities::unaligned_operands, &Capabilities::unaligned_operands},
      {&ballast_capabilities::guarded_host_reads, &Capabilities::guarded_host_reads},
  };
  for (std::size_t on = 0; on <= std::size(flags); ++on) {  // the last round: none set
    CAPTURE(on);
    ballast_capabilities caps{};
    caps.struct_size = sizeof caps;
    caps.import_alignment = 64;
    caps.max_single_allocation = 12345;
    if (on < std::size(flags)) caps.*(flags[on].first) = 1;
    ballast_backend t = complete_backend();
    t.capabilities = &caps;
    auto adopted = detail::adopt_backend_table(&t);
    REQUIRE_MESSAGE(adopted.ok(), adopted.error().to_string());
    const Capabilities& got = (*adopted)->capabilities();
    for (std::size_t i = 0; i < std::size(flags); ++i) {
      CAPTURE(i);
      CHECK(got.*(flags[i].second) == (i == on));
    }
    CHECK(got.import_alignment == 64);
    CHECK(got.max_single_allocation == 12345);
  }
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

namespace {

int g_launched = 0;

// A backend table whose allocations are real ranges (so launches pass the
// core's checks) and whose launch() counts the launches it is sent.
ballast_backend counting_backend() {
  ballast_backend t = complete_backend();
  t.allocate = [](void*, uint64_t, uint64_t, uint64_t* ptr, uint64_t* cookie, ballast_error*) -> int32_t {
    static uint64_t next = 0;
    next += 0x100000;
    *ptr = next;
    *cookie = next;
    return 0;
  };
  t.launch = [](void*, const ballast_launch*, ballast_error*) -> int32_t {
    ++g_launched;
    return 0;
  };
  return t;
}

// Whether a launch of `kind` over a 4x4 u8 source (2 columns for slice)
// reaches the plugin; the core's error otherwise.
Status launch_kind(GpuBackend& b, Derivation kind) {
  auto src = b.allocate(16);
  auto dst = b.allocate(16);
  REQUIRE(src.ok());
  REQUIRE(dst.ok());
  DerivationLaunch l;
  l.kind = kind;
  l.src_type = DataType::uint8;
  l.rows = 4;
  l.cols = kind == Derivation::slice ? 2 : 4;
  l.src_cols = kind == Derivation::slice ? 4 : 0;
  l.col_offset = kind == Derivation::slice ? 1 : 0;
  l.src = *src;
  l.dst = *dst;
  const Status s = b.launch(l);
  CHECK(b.free(*src).ok());
  CHECK(b.free(*dst).ok());
  return s;
}

}  // namespace

TEST_CASE("kinds past a backend table's kind_count never reach its launch(); a table without the field knows 9") {
  struct Case {
    std::size_t size;
    std::uint32_t kind_count;
    bool slice_reaches;
  };
  for (const Case c : {Case{sizeof(ballast_backend), 10, true}, Case{sizeof(ballast_backend), 9, false},
                       Case{offsetof(ballast_backend, kind_count), 0, false}}) {
    CAPTURE(c.size);
    CAPTURE(c.kind_count);
    ballast_backend t = counting_backend();
    t.struct_size = c.size;
    t.kind_count = c.kind_count;
    auto adopted = detail::adopt_backend_table(&t);
    REQUIRE_MESSAGE(adopted.ok(), adopted.error().to_string());
    g_launched = 0;
    CHECK(launch_kind(**adopted, Derivation::transpose).ok());
    CHECK(g_launched == 1);
    const Status slice = launch_kind(**adopted, Derivation::slice);
    CHECK(slice.ok() == c.slice_reaches);
    CHECK(g_launched == (c.slice_reaches ? 2 : 1));
    if (!c.slice_reaches) {
      CHECK(slice.code() == ErrorCode::unsupported);
      CHECK(slice.to_string().find("knows 9 derivation kinds, not this later one") != std::string::npos);
    }
  }
  // A table with the field that knows fewer than 1.1's nine kinds is no
  // table of 1.2: refused where it is adopted, not at every launch.
  for (std::uint32_t n : {0u, 1u, 8u}) {
    CAPTURE(n);
    ballast_backend t = counting_backend();
    t.kind_count = n;
    g_destroyed = 0;
    auto adopted = detail::adopt_backend_table(&t);
    REQUIRE_FALSE(adopted.ok());
    CHECK(adopted.error().code == ErrorCode::abi_mismatch);
    CHECK_MESSAGE(adopted.error().message.find("knows " + std::to_string(n) + " derivation kinds (kind_count)") !=
                      std::string::npos,
                  adopted.error().message);
  }
}

namespace {
int32_t g_code = 0;  // what the table's synchronize() sets and returns
}  // namespace

TEST_CASE(
    "a plugin's error code arrives as its ErrorCode with its message as written; an unknown one as internal, named") {
  ballast_backend t = complete_backend();
  t.synchronize = [](void*, ballast_error* e) -> int32_t {
    e->set(e, g_code, "the device said no", "NATIVE_NO");
    return g_code;
  };
  auto adopted = detail::adopt_backend_table(&t);
  REQUIRE_MESSAGE(adopted.ok(), adopted.error().to_string());
  GpuBackend& gpu = **adopted;

  g_code = BALLAST_OUT_OF_MEMORY;
  Status s = gpu.synchronize();
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == ErrorCode::out_of_memory);
  CHECK(s.error().message == "the device said no");
  CHECK(s.error().native == "NATIVE_NO");

  g_code = BALLAST_INTERNAL;  // internal by name: no number added
  s = gpu.synchronize();
  CHECK(s.code() == ErrorCode::internal);
  CHECK(s.error().message == "the device said no");

  g_code = 999;  // no ErrorCode: internal, and the message says which code came
  s = gpu.synchronize();
  CHECK(s.code() == ErrorCode::internal);
  CHECK(s.error().message == "(plugin error code 999) the device said no");
}

namespace {
int32_t g_set_code = 0;       // what the table's synchronize() sets
int32_t g_returned_code = 0;  // and what it returns
}  // namespace

TEST_CASE("a plugin that sets one code and returns another: a known returned code wins, every known one") {
  ballast_backend t = complete_backend();
  t.synchronize = [](void*, ballast_error* e) -> int32_t {
    e->set(e, g_set_code, "the device said no", "NATIVE_NO");
    return g_returned_code;
  };
  auto adopted = detail::adopt_backend_table(&t);
  REQUIRE_MESSAGE(adopted.ok(), adopted.error().to_string());
  GpuBackend& gpu = **adopted;
  // Every known code returned over another one set, the first and the last
  // (internal) included; the message is the one set.
  for (int32_t returned = 1; returned <= static_cast<int32_t>(ErrorCode::internal); ++returned) {
    g_set_code = returned == BALLAST_DEVICE_ERROR ? BALLAST_OUT_OF_MEMORY : BALLAST_DEVICE_ERROR;
    g_returned_code = returned;
    CAPTURE(returned);
    const Status s = gpu.synchronize();
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == static_cast<ErrorCode>(returned));
    CHECK(s.error().message == "the device said no");
    CHECK(s.error().native == "NATIVE_NO");
  }
  // An unknown code returned: the code that was set stands.
  g_set_code = BALLAST_IO;
  g_returned_code = 999;
  const Status s = gpu.synchronize();
  CHECK(s.code() == ErrorCode::io);
  CHECK(s.error().message == "the device said no");

  // Nothing set: a known code is itself (internal, the last, too), an
  // unknown one internal, naming the number.
  ballast_backend silent = complete_backend();
  silent.synchronize = [](void*, ballast_error*) -> int32_t { return g_returned_code; };
  auto quiet = detail::adopt_backend_table(&silent);
  REQUIRE_MESSAGE(quiet.ok(), quiet.error().to_string());
  for (int32_t returned = 1; returned <= static_cast<int32_t>(ErrorCode::internal); ++returned) {
    g_returned_code = returned;
    CAPTURE(returned);
    const Status q = (*quiet)->synchronize();
    REQUIRE_FALSE(q.ok());
    CHECK(q.code() == static_cast<ErrorCode>(returned));
    CHECK(q.error().message == "the plugin reported an error without a message");
  }
  g_returned_code = static_cast<int32_t>(ErrorCode::internal) + 1;
  const Status unknown = (*quiet)->synchronize();
  CHECK(unknown.code() == ErrorCode::internal);
  CHECK(unknown.error().message ==
        "the plugin returned error code " + std::to_string(g_returned_code) + " without a message");
}

namespace {
uint64_t g_returned = 0;  // the pointer the table's allocate() and register_host() hand back
int g_given_back = 0;     // frees and unregistrations the core made of them
}  // namespace

// What a backend hands back is checked once, where it comes in: a null
// pointer, a range past the end of the address space or an ignored
// alignment is the backend's bug, said as internal, and given back to it;
// nothing of it is counted live.
TEST_CASE("an allocation or registration no device could return is refused where it comes in, and given back") {
  ballast_backend t = complete_backend();
  ballast_capabilities caps{};
  caps.struct_size = sizeof caps;
  caps.host_registration = 1;
  caps.guarded_host_reads = 1;
  caps.max_single_allocation = 1 << 20;
  t.capabilities = &caps;
  t.allocate = [](void*, uint64_t, uint64_t, uint64_t* ptr, uint64_t* cookie, ballast_error*) -> int32_t {
    *ptr = g_returned;
    *cookie = 7;
    return 0;
  };
  t.free = [](void*, uint64_t, uint64_t, uint64_t, ballast_error*) -> int32_t {
    ++g_given_back;
    return 0;
  };
  t.register_host = [](void*, const void*, uint64_t, int32_t, uint64_t* ptr, uint64_t* cookie,
                       ballast_error*) -> int32_t {
    *ptr = g_returned;
    *cookie = 7;
    return 0;
  };
  t.unregister_host = [](void*, uint64_t, uint64_t, uint64_t, int32_t, ballast_error*) -> int32_t {
    ++g_given_back;
    return 0;
  };
  auto adopted = detail::adopt_backend_table(&t);
  REQUIRE_MESSAGE(adopted.ok(), adopted.error().to_string());
  GpuBackend& gpu = **adopted;
  struct Case {
    uint64_t ptr;
    uint64_t alignment;
    const char* says;
  };
  for (const Case c :
       {Case{0, 1, "the backend returned a null pointer"}, Case{UINT64_MAX - 15, 1, "which wraps the address space"},
        Case{0x1001, 256, "the backend returned 0x1001, not a multiple of the alignment 256"}}) {
    CAPTURE(c.ptr);
    g_returned = c.ptr;
    g_given_back = 0;
    auto a = gpu.allocate(64, c.alignment);
    REQUIRE_FALSE(a.ok());
    CHECK(a.error().code == ErrorCode::internal);
    CHECK_MESSAGE(a.error().to_string().find(c.says) != std::string::npos, a.error().to_string());
    CHECK(g_given_back == 1);
    CHECK(gpu.counters().live_allocations == 0);
  }
  g_returned = 0x100000;  // a good one goes through
  auto good = gpu.allocate(64, 256);
  REQUIRE_MESSAGE(good.ok(), good.error().to_string());
  CHECK(gpu.free(*good).ok());

  static const std::byte host[64] = {};
  for (const uint64_t bad : {uint64_t{0}, UINT64_MAX - 15}) {
    CAPTURE(bad);
    g_returned = bad;
    g_given_back = 0;
    auto r = gpu.register_host(host, sizeof host, HostAccess::read_write);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::internal);
    CHECK_MESSAGE(
        r.error().to_string().find(bad == 0 ? "a null pointer" : "wraps the address space") != std::string::npos,
        r.error().to_string());
    CHECK(g_given_back == 1);
    CHECK(gpu.counters().live_registrations == 0);
  }
}
