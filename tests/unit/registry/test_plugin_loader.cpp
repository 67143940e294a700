// The loader against fake plugin libraries: each lives alone in its own
// folder under FAKE_PLUGIN_ROOT (see CMakeLists.txt).
#include "support/text.hpp"
#include "unit/registry/fake_plugins.hpp"
#include "registry/plugin_loader.hpp"
#include "registry/registry.hpp"

#include <algorithm>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace ballast;
using ballast::registry::PluginLoader;

namespace {

// Listings that load every plugin found, as `ballast backends --load`.
ListOptions load_all() {
  ListOptions o;
  o.load_all = true;
  return o;
}

using ballast::testing::fake_dir;
using ballast::testing::fake_library;

using ballast::testing::contains;

// A fresh empty folder, removed again at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("ballast-registry-test-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter()++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace

TEST_CASE("a plugin not on the search path is not_found and lists every path searched") {
  TempDir a, b;
  PluginLoader loader({a.path.string(), b.path.string()});
  auto loaded = loader.load("cuda");
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.code() == ErrorCode::not_found);
  const std::string text = loaded.error().to_string();
  CHECK(contains(text, (a.path / "libballast-cuda.so").string()));
  CHECK(contains(text, (b.path / "libballast-cuda.so").string()));
  CHECK(loader.candidate_paths("cuda") ==
        std::vector<std::string>{(a.path / "libballast-cuda.so").string(), (b.path / "libballast-cuda.so").string()});

  auto opened = registry::open_backend(loader, "cuda:0");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.code() == ErrorCode::not_found);
  CHECK(contains(opened.error().to_string(), "opening backend \"cuda:0\""));
}

// Sets BALLAST_PLUGIN_PATH for one scope, restoring what was there.
struct ScopedPluginPath {
  const char* old;
  std::string saved;
  explicit ScopedPluginPath(const std::string& value) : old(std::getenv("BALLAST_PLUGIN_PATH")) {
    if (old != nullptr) saved = old;
    ::setenv("BALLAST_PLUGIN_PATH", value.c_str(), 1);
  }
  ~ScopedPluginPath() {
    if (old != nullptr) ::setenv("BALLAST_PLUGIN_PATH", saved.c_str(), 1);
    else ::unsetenv("BALLAST_PLUGIN_PATH");
  }
};

TEST_CASE("the search path: BALLAST_PLUGIN_PATH, the engine's folders, <libballast's folder>/ballast, the build tree") {
  TempDir a, b, engine;
  std::vector<std::string> dirs;
  {
    ScopedPluginPath env(a.path.string() + "::" + b.path.string() + "/:" + a.path.string());
    dirs = registry::default_plugin_search_dirs({engine.path.string(), a.path.string()});
  }
  REQUIRE(dirs.size() == 5);
  CHECK(dirs[0] == a.path.string());
  CHECK(dirs[1] == b.path.string());  // empty entries and duplicates dropped, trailing '/' trimmed
  CHECK(dirs[2] == engine.path.string());
  // No absolute install folder: only places found relative to libballast,
  // so an install keeps finding its plugins after it is moved.
  CHECK(dirs[3] == std::string(BALLAST_BINARY_DIR) + "/lib/ballast");
  CHECK(dirs[4] == std::string(BALLAST_BINARY_DIR) + "/lib");  // this test runs from the build tree
}

TEST_CASE("a plugin not found is looked for again once the search folders change; a loaded one stays") {
  TempDir empty;
  PluginLoader loader({empty.path.string()});
  auto missing = loader.load("vulkan");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.code() == ErrorCode::not_found);
  CHECK(loader.load("vulkan").code() == ErrorCode::not_found);  // same folders: the outcome is kept

  loader.set_search_dirs({fake_dir("working")});
  CHECK(loader.search_dirs() == std::vector<std::string>{fake_dir("working")});
  auto found = loader.load("vulkan");
  REQUIRE(found.ok());
  CHECK(found->library == fake_library("working"));

  loader.set_search_dirs({empty.path.string()});
  auto again = loader.load("vulkan");
  REQUIRE(again.ok());
  CHECK(again->plugin == found->plugin);
}

TEST_CASE("set_plugin_search_path puts the engine's folders after BALLAST_PLUGIN_PATH, before libballast's") {
  TempDir engine;
  set_plugin_search_path({engine.path.string()});
  const auto dirs = plugin_search_paths();
  set_plugin_search_path({});
  CHECK(dirs == registry::default_plugin_search_dirs({engine.path.string()}));
  const auto at = std::find(dirs.begin(), dirs.end(), engine.path.string());
  REQUIRE(at != dirs.end());
  REQUIRE(at + 1 != dirs.end());
  CHECK(*(at + 1) == std::string(BALLAST_BINARY_DIR) + "/lib/ballast");
  const auto after = plugin_search_paths();
  CHECK(std::find(after.begin(), after.end(), engine.path.string()) == after.end());
}

TEST_CASE("plugins whose table does not match are abi_mismatch errors naming both versions and the library") {
  struct Row {
    std::string kind;
    std::vector<std::string> mentions;
  };
  const std::string core = "core plugin ABI " + std::to_string(BALLAST_PLUGIN_API_MAJOR) + "." + std::to_string(BALLAST_PLUGIN_API_MINOR);
  const Row table[] = {
      {"wrong_abi", {"plugin ABI 2.0", core, "accepts 1.x"}},   // the next major
      {"abi_older", {"plugin ABI 0.9", core}},                  // the one before
      {"abi_truncated", {"smaller than ABI 1.0's"}},             // a 1.x table cut short
      {"wrong_name", {"names itself \"cuda\"", "expected \"vulkan\""}},
      {"no_symbol", {"not a ballast plugin", "ballast_plugin_entry"}},
      // A plugin of the C++ ABI that came before plugin_api.h: told to rebuild.
      {"old_descriptor", {"C++ plugin ABI", "rebuild it", "plugin ABI " + std::to_string(BALLAST_PLUGIN_API_MAJOR) + "." + std::to_string(BALLAST_PLUGIN_API_MINOR)}},
  };
  for (const auto& row : table) {
    CAPTURE(row.kind);
    PluginLoader loader({fake_dir(row.kind)});
    auto loaded = loader.load("vulkan");
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.code() == ErrorCode::abi_mismatch);
    CHECK(loaded.error().file == fake_library(row.kind));
    const std::string text = loaded.error().to_string();
    CAPTURE(text);
    for (const auto& m : row.mentions) CHECK(contains(text, m));

    auto opened = registry::open_backend(loader, "vulkan");
    REQUIRE_FALSE(opened.ok());
    CHECK(opened.code() == ErrorCode::abi_mismatch);
  }
}

TEST_CASE("any minor of the core's major loads: ABI 1.0's smaller table and a newer minor's larger one") {
  // No compiler or build fingerprint is compared any more: only plain C
  // crosses, so only the ABI version matters.
  for (const std::string kind : {"abi_1_0", "abi_newer", "working"}) {
    CAPTURE(kind);
    PluginLoader loader({fake_dir(kind)});
    auto loaded = loader.load("vulkan");
    REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
    CHECK(loaded->plugin->devices().ok());
    auto opened = registry::open_backend(loader, "vulkan:1");
    REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
    CHECK((*opened)->info().name == "fake device 1");
    // Every call reaches the plugin's C functions, whose refusal comes back as a typed error.
    CHECK((*opened)->allocate(16).code() == ErrorCode::unsupported);
    CHECK((*opened)->extension("anything") == nullptr);
  }
  PluginLoader old_minor({fake_dir("abi_1_0")});
  CHECK(old_minor.load("vulkan")->plugin->api_minor() == 0);
}

// The plugin-wide get_proc_address (ABI 1.1) is reached by name, without
// opening a device; a 1.0 table has no such field, and its plugin answers
// null even though the fake's code sets one past its struct_size.
TEST_CASE("plugin_extension reaches a plugin's own get_proc_address, and a 1.0 plugin has none") {
  PluginLoader loader({fake_dir("working")});
  auto found = registry::plugin_extension(loader, "vulkan", "fake_plugin_wide");
  REQUIRE_MESSAGE(found.ok(), found.error().to_string());
  REQUIRE(*found != nullptr);
  CHECK(std::string(*static_cast<const char* const*>(*found)) == "vulkan");
  auto none = registry::plugin_extension(loader, "vulkan", "no_such_extension");
  REQUIRE(none.ok());
  CHECK(*none == nullptr);
  PluginLoader old_minor({fake_dir("abi_1_0")});
  auto old = registry::plugin_extension(old_minor, "vulkan", "fake_plugin_wide");
  REQUIRE(old.ok());
  CHECK(*old == nullptr);
  // The errors of open_backend for the name: unknown, not found, a null name.
  CHECK(registry::plugin_extension(loader, "nosuch", "x").code() == ErrorCode::invalid_argument);
  PluginLoader empty({fake_dir("no_symbol") + "/missing"});
  CHECK(registry::plugin_extension(empty, "cuda", "x").code() == ErrorCode::not_found);
  CHECK(registry::plugin_extension(loader, "vulkan", nullptr).code() == ErrorCode::invalid_argument);
}

// A daemon may run with its standard input closed: then the first
// descriptor opened, the plugin folder's, is 0, and is a folder all the same.
TEST_CASE("a plugin loads when the process runs with its standard input closed") {
  const int saved = ::dup(0);
  REQUIRE(saved >= 0);
  REQUIRE(::close(0) == 0);
  PluginLoader loader({fake_dir("working")});
  auto loaded = loader.load("vulkan");
  REQUIRE(::dup2(saved, 0) == 0);  // stdin back before any check can end the case
  ::close(saved);
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  CHECK(loaded->plugin->devices().ok());
}

TEST_CASE("a file that is not a loadable library is reported with the loader's message") {
  TempDir dir;
  std::ofstream(dir.path / "libballast-hip.so") << "this is not an ELF file";
  std::filesystem::permissions(dir.path, std::filesystem::perms(0755));
  std::filesystem::permissions(dir.path / "libballast-hip.so", std::filesystem::perms(0644));
  PluginLoader loader({dir.path.string()});
  auto loaded = loader.load("hip");
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.code() == ErrorCode::io);
  CHECK(contains(loaded.error().message, "dlopen failed"));
  CHECK(contains(loaded.error().message, "libballast-hip.so"));  // dlerror names the file
  CHECK(loaded.error().file == (dir.path / "libballast-hip.so").string());
}

TEST_CASE("the first plugin found is the one used: a broken one is never skipped for another") {
  PluginLoader loader({fake_dir("wrong_abi"), fake_dir("working")});
  auto loaded = loader.load("vulkan");
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.code() == ErrorCode::abi_mismatch);
}

TEST_CASE("each plugin is loaded once, even when many threads ask at the same time") {
  PluginLoader loader({fake_dir("working")});
  std::vector<const ballast::detail::PluginTable*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] {
      auto loaded = loader.load("vulkan");
      if (loaded.ok()) seen[i] = loaded->plugin;
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(seen[0] != nullptr);
  for (auto* p : seen) CHECK(p == seen[0]);
  auto again = loader.load("vulkan");
  REQUIRE(again.ok());
  CHECK(again->plugin == seen[0]);
  CHECK(again->library == fake_library("working"));
}

TEST_CASE("a plugin reporting unavailable passes its reason through with context") {
  PluginLoader loader({fake_dir("unavailable")});
  auto opened = registry::open_backend(loader, "vulkan:0");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.code() == ErrorCode::unavailable);
  CHECK(opened.error().to_string() ==
        "unavailable: opening backend \"vulkan:0\": no fake physical device (test plugin)");
}

TEST_CASE("a plugin that fails without a message is contained as an internal error") {
  PluginLoader loader({fake_dir("silent_error")});
  auto opened = registry::open_backend(loader, "vulkan");
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.code() == ErrorCode::internal);
  CHECK(contains(opened.error().message, "without a message"));
}

TEST_CASE("devices are chosen by index or UUID and a missing one lists the available ones") {
  PluginLoader loader({fake_dir("working")});
  SUBCASE("default device") {
    auto b = registry::open_backend(loader, "vulkan");
    REQUIRE_MESSAGE(b.ok(), b.status().to_string());
    CHECK((*b)->info().index == 0);
  }
  SUBCASE("by index") {
    auto b = registry::open_backend(loader, "vulkan:1");
    REQUIRE_MESSAGE(b.ok(), b.status().to_string());
    CHECK((*b)->info().index == 1);
  }
  SUBCASE("by UUID, any case") {
    auto b = registry::open_backend(loader, "vulkan:GPU-00000001-AAAA-bbbb-cccc-0123456789ab");
    REQUIRE_MESSAGE(b.ok(), b.status().to_string());
    CHECK((*b)->info().index == 1);
  }
  SUBCASE("index out of range") {
    auto b = registry::open_backend(loader, "vulkan:2");
    REQUIRE_FALSE(b.ok());
    CHECK(b.code() == ErrorCode::not_found);
    CHECK(b.error().to_string() ==
          "not_found: opening backend \"vulkan:2\": no device with index 2; available devices: "
          "0: fake device 0 (GPU-00000000-aaaa-bbbb-cccc-0123456789AB); "
          "1: fake device 1 (GPU-00000001-aaaa-bbbb-cccc-0123456789AB)");
  }
  SUBCASE("unknown UUID") {
    auto b = registry::open_backend(loader, "vulkan:GPU-00000009-aaaa-bbbb-cccc-0123456789ab");
    REQUIRE_FALSE(b.ok());
    CHECK(b.code() == ErrorCode::not_found);
    CHECK(contains(b.error().message, "no device with UUID GPU-00000009-aaaa-bbbb-cccc-0123456789ab"));
    CHECK(contains(b.error().message, "1: fake device 1"));
  }
  SUBCASE("the plugin's own refusal of an option comes through") {
    auto b = registry::open_backend(loader, "vulkan?colour=blue");
    REQUIRE_FALSE(b.ok());
    CHECK(b.code() == ErrorCode::invalid_argument);
    CHECK(contains(b.error().to_string(), "unknown option \"colour\""));
  }
}

TEST_CASE("list_backends reports every known backend with its state, reason and devices") {
  PluginLoader loader({fake_dir("working")});
  const auto listing = registry::list_backends(loader, load_all());
  const auto known = registry::known_backend_names(loader);
  CHECK(known == std::vector<std::string>{"cpu", "cuda", "hip", "vulkan"});
  REQUIRE(listing.size() == known.size());
  for (std::size_t i = 0; i < listing.size(); ++i) CHECK(listing[i].name == known[i]);

  const auto& cpu = listing[0];
  CHECK(cpu.state == BackendListing::State::available);
  CHECK(cpu.library == "built in");
  CHECK_FALSE(cpu.devices.empty());
  CHECK(cpu.capabilities.max_single_allocation > 0);

  for (const auto* missing : {&listing[1], &listing[2]}) {
    CAPTURE(missing->name);
    CHECK(missing->state == BackendListing::State::not_found);
    CHECK(backend_state_name(missing->state) == "not found");
    CHECK(missing->searched == loader.candidate_paths(missing->name));
    CHECK(contains(missing->reason, "libballast-" + missing->name + ".so"));
  }

  const auto& vulkan = listing[3];
  CHECK(vulkan.state == BackendListing::State::available);
  CHECK(vulkan.reason.empty());
  CHECK(vulkan.library == fake_library("working"));
  REQUIRE(vulkan.devices.size() == 2);
  CHECK(vulkan.devices[1].name == "fake device 1");
  CHECK(vulkan.devices[1].memory_bytes == (std::uint64_t{2} << 30));
  CHECK_FALSE(vulkan.capabilities.host_registration);
  CHECK(vulkan.capabilities.host_registration_note == "fake backend: uploads only");
}

TEST_CASE("list_backends reports unavailable and load errors with their reasons") {
  PluginLoader unavailable({fake_dir("unavailable")});
  const auto u = registry::list_backends(unavailable, load_all())[3];
  CHECK(u.state == BackendListing::State::unavailable);
  CHECK(u.library == fake_library("unavailable"));
  CHECK(contains(u.reason, "no fake physical device"));
  CHECK(u.devices.empty());

  PluginLoader broken({fake_dir("wrong_abi")});
  const auto b = registry::list_backends(broken, load_all())[3];
  CHECK(b.state == BackendListing::State::load_error);
  CHECK(backend_state_name(b.state) == "load error");
  CHECK(contains(b.reason, "abi_mismatch"));
  CHECK(b.searched.empty());
}

// A plugin that loads but breaks the contract when asked for its devices or
// a backend: refused as abi_mismatch naming its file, listed as a load error.
TEST_CASE("a plugin whose devices or backend table break the ABI is a load error naming its file") {
  struct Case {
    const char* kind;
    const char* says;
  };
  for (const Case c : {Case{"no_allocate", "the backend table lacks a required entry: allocate (NULL)"},
                       Case{"null_device", "devices() reported device 1 as a null pointer"},
                       Case{"small_info", "devices() reported device 1 in a 0-byte ballast_device_info (struct_size)"},
                       Case{"bad_index", "devices() reported \"fake device 1\" with index 5 in position 1"},
                       Case{"no_table", "the plugin's open() returned no backend table"}}) {
    CAPTURE(c.kind);
    PluginLoader loader({fake_dir(c.kind)});
    auto opened = registry::open_backend(loader, "vulkan:0");
    REQUIRE_FALSE(opened.ok());
    CHECK(opened.code() == ErrorCode::abi_mismatch);
    CHECK_MESSAGE(contains(opened.error().message, c.says), opened.error().to_string());
    CHECK(opened.error().file == fake_library(c.kind));
    const auto listed = registry::list_backends(loader, load_all())[3];
    CHECK(listed.state == BackendListing::State::load_error);
    CHECK_MESSAGE(contains(listed.reason, c.says), listed.reason);
    CHECK(contains(listed.reason, fake_library(c.kind)));
  }
}

// A refused copy earlier on the path stays listed once a later one loads.
TEST_CASE("a loaded plugin's listing keeps the copies refused before it") {
  TempDir writable;
  std::filesystem::copy_file(fake_library("working"), writable.path / "libballast-vulkan.so");
  std::filesystem::permissions(writable.path / "libballast-vulkan.so", std::filesystem::perms::group_write,
                               std::filesystem::perm_options::add);
  PluginLoader loader({writable.path.string(), fake_dir("working")});
  const auto listed = registry::list_backends(loader, load_all())[3];
  CHECK(listed.state == BackendListing::State::available);
  CHECK(listed.library == fake_library("working"));
  REQUIRE(listed.refused.size() == 1);
  CHECK(contains(listed.refused[0], (writable.path / "libballast-vulkan.so").string()));
  CHECK(contains(listed.refused[0], "writable by group"));
}

TEST_CASE("several backends are open at once, from one plugin and from several") {
  PluginLoader loader({fake_dir("working")});
  auto cpu1 = registry::open_backend(loader, "cpu");
  auto cpu2 = registry::open_backend(loader, "cpu:0");
  auto v0 = registry::open_backend(loader, "vulkan:0");
  auto v1 = registry::open_backend(loader, "vulkan:1");
  REQUIRE_MESSAGE(cpu1.ok(), cpu1.status().to_string());
  REQUIRE_MESSAGE(cpu2.ok(), cpu2.status().to_string());
  REQUIRE(v0.ok());
  REQUIRE(v1.ok());
  CHECK(cpu1->get() != cpu2->get());
  CHECK((*cpu1)->info().backend == "cpu");
  CHECK((*v0)->info().index == 0);
  CHECK((*v1)->info().index == 1);
  // The two CPU backends are independent: one's allocation is not the other's.
  auto p = (*cpu1)->allocate(64, 64);
  REQUIRE(p.ok());
  CHECK((*cpu1)->counters().live_allocations == 1);
  CHECK((*cpu2)->counters().live_allocations == 0);
  CHECK((*cpu1)->free(*p).ok());
}

TEST_CASE("plugin files in the search folders are discovered by name: sorted, once each, valid names only") {
  TempDir odd;
  // Not plugins of a valid name: each is skipped.
  for (const char* file : {"libballast-Upper.so", "libballast-.so", "libballast-9lives.so", "libballast-dash-ed.so",
                           "libballast-x.so.1", "libballastx.so", "libballast-x.a", "libballast.so"}) {
    std::ofstream(odd.path / file) << "not a library";
  }
  std::filesystem::create_directory(odd.path / "libballast-folder.so");
  std::ofstream(odd.path / "libballast-odd_one2.so") << "found by name; not loadable";

  PluginLoader loader({fake_dir("third_party"), odd.path.string(), fake_dir("working"), fake_dir("third_party")});
  CHECK(loader.discover() == std::vector<std::string>{"odd_one2", "thirdparty", "vulkan"});
  CHECK(registry::known_backend_names(loader) ==
        std::vector<std::string>{"cpu", "cuda", "hip", "vulkan", "odd_one2", "thirdparty"});

  PluginLoader nowhere({(odd.path / "missing").string()});
  CHECK(nowhere.discover().empty());
  CHECK(registry::known_backend_names(nowhere) == std::vector<std::string>{"cpu", "cuda", "hip", "vulkan"});
}

TEST_CASE("a discovered third-party plugin is listed, opened, and named among the known backends") {
  PluginLoader loader({fake_dir("working"), fake_dir("third_party")});
  const auto listing = registry::list_backends(loader, load_all());
  REQUIRE(listing.size() == 5);
  const auto& third = listing[4];
  CHECK(third.name == "thirdparty");
  CHECK(third.state == BackendListing::State::available);
  CHECK(third.library == std::string(FAKE_PLUGIN_ROOT) + "/third_party/libballast-thirdparty.so");
  REQUIRE(third.devices.size() == 2);
  CHECK(third.devices[0].backend == "thirdparty");

  auto opened = registry::open_backend(loader, "thirdparty:1");
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CHECK((*opened)->info().index == 1);

  auto unknown = registry::open_backend(loader, "opencl");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.code() == ErrorCode::invalid_argument);
  CHECK(unknown.error().message == "unknown backend \"opencl\"; known backends: cpu, cuda, hip, vulkan, thirdparty");
}

TEST_CASE("a first-party backend whose plugin is missing is still listed, with the paths searched") {
  PluginLoader loader({fake_dir("third_party")});
  const auto listing = registry::list_backends(loader);
  REQUIRE(listing.size() == 5);
  CHECK(listing[3].name == "vulkan");
  CHECK(listing[3].state == BackendListing::State::not_found);
  CHECK(listing[3].searched == std::vector<std::string>{fake_dir("third_party") + "/libballast-vulkan.so"});
  CHECK(listing[4].name == "thirdparty");
}

TEST_CASE("BALLAST_PLUGIN_ENTRY writes a table the registry accepts, whatever form the factory takes") {
  for (const std::string kind : {"expression", "function", "lambda"}) {
    CAPTURE(kind);
    const std::string name = "entry_" + kind;
    PluginLoader loader({fake_dir(name)});
    CHECK(loader.discover() == std::vector<std::string>{name});
    auto loaded = loader.load(name);
    REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
    auto devices = loaded->plugin->devices();
    REQUIRE(devices.ok());
    CHECK((*devices)[0].name == "entry-macro device");
    auto opened = registry::open_backend(loader, name);
    REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
    CHECK((*opened)->info().backend == "cpu");
  }
}

TEST_CASE("BALLAST_PLUGIN_ENTRY keeps a factory's exception, or its null, from crossing: devices() and open() say so") {
  // The factory runs when the plugin is first used, not when the file is
  // checked, so the file loads and its first call reports the failure.
  for (const std::string kind : {"throws", "null"}) {
    CAPTURE(kind);
    const std::string name = "entry_" + kind;
    PluginLoader loader({fake_dir(name)});
    auto loaded = loader.load(name);
    REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
    auto devices = loaded->plugin->devices();
    REQUIRE_FALSE(devices.ok());
    CHECK(devices.code() == ErrorCode::internal);
    CHECK(devices.error().message == "the plugin's factory threw an exception or returned null");
    auto opened = registry::open_backend(loader, name);
    REQUIRE_FALSE(opened.ok());
    CHECK(opened.code() == ErrorCode::internal);
  }
}
