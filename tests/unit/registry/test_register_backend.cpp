// register_backend: a backend linked into the program, registered by name
// through the public hook (the way libballast's own CPU backend is). Every
// registration here lasts until the process exits, so each test case uses
// names of its own.
#include "support/text.hpp"
#include <ballast/backend_registry.hpp>
#include <ballast/plugin_abi.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace ballast;

namespace {

std::string fake_dir(const std::string& kind) { return std::string(FAKE_PLUGIN_ROOT) + "/" + kind; }

using ballast::testing::contains;

// A backend with one device of its own that opens the CPU backend, and
// remembers what it was asked for.
class Recording final : public BackendPlugin {
 public:
  explicit Recording(std::string name) : name_(std::move(name)) {}

  Result<std::vector<DeviceInfo>> devices() override {
    DeviceInfo d;
    d.backend = name_;
    d.index = 0;
    d.name = name_ + " device";
    d.uuid = "GPU-12345678-aaaa-bbbb-cccc-0123456789ab";
    d.driver = "registered in the test";
    d.memory_bytes = 1 << 20;
    return std::vector<DeviceInfo>{d};
  }

  Result<std::unique_ptr<BackendDevice>> open(const BackendConfig& config) override {
    ++opens;
    last_config = config.text;
    return forward_device(open_backend("cpu?threads=1"));
  }

  std::atomic<int> opens{0};
  std::string last_config;

 private:
  std::string name_;
};

// Lives until exit, as the registry requires (and stays reachable, so a
// plugin whose registration was refused is no leak either).
Recording& leaked(const std::string& name) {
  static auto* const kept = new std::vector<std::unique_ptr<Recording>>();
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  kept->push_back(std::make_unique<Recording>(name));
  return *kept->back();
}

bool is_known(const std::string& name) {
  const auto names = known_backend_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

const BackendListing* find_listing(const std::vector<BackendListing>& listing, const std::string& name) {
  for (const auto& b : listing) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("register_backend refuses a name that is not a lowercase identifier") {
  Recording& plugin = leaked("bad");
  for (const std::string name : {"", "Upper", "9lives", "_under", "dash-ed", "two words", "colon:0", "caf\xc3\xa9", "q?x=1"}) {
    CAPTURE(name);
    const Status s = register_backend(name, plugin);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == ErrorCode::invalid_argument);
    CHECK(s.error().to_string() == "invalid_argument: registering backend \"" + name +
                                       "\": a backend name is a lowercase identifier, [a-z][a-z0-9_]*");
    CHECK_FALSE(is_known(name));
  }
  for (const std::string name : {"a", "z9", "my_backend_2"}) {
    CAPTURE(name);
    CHECK(register_backend(name, plugin).ok());
  }
}

// Past std::string's short-string buffer (15 characters): the SDK's copy
// of the name stays reachable from the registered table, so LeakSanitizer
// (the asan preset) sees no leak at exit.
TEST_CASE("a long name registers, opens, and is kept without a leak") {
  const std::string name = "a_vendor_backend_with_a_long_name";
  REQUIRE(register_backend(name, leaked(name)).ok());
  auto opened = open_backend(name);
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CHECK(is_known(name));
}

TEST_CASE("a registered backend is known, listed and opened by its name, options and all") {
  Recording& plugin = leaked("static_one");
  REQUIRE(register_backend("static_one", plugin).ok());

  const auto names = known_backend_names();
  REQUIRE(names.size() > 4);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 4) ==
        std::vector<std::string>{"cpu", "cuda", "hip", "vulkan"});
  CHECK(std::count(names.begin(), names.end(), "static_one") == 1);

  auto opened = open_backend("static_one:0?mode=fast");
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CHECK(plugin.opens == 1);
  CHECK(plugin.last_config == "static_one:0?mode=fast");
  CHECK((*opened)->info().backend == "cpu");  // what it delegates to

  // The registry still checks the device against the plugin's list.
  auto missing = open_backend("static_one:3");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.code() == ErrorCode::not_found);
  CHECK(contains(missing.error().message, "0: static_one device (GPU-12345678-aaaa-bbbb-cccc-0123456789ab)"));
  CHECK(plugin.opens == 1);

  const auto listing = list_backends();
  const BackendListing* mine = find_listing(listing, "static_one");
  REQUIRE(mine != nullptr);
  CHECK(mine->state == BackendListing::State::available);
  CHECK(mine->library == "built in");
  REQUIRE(mine->devices.size() == 1);
  CHECK(mine->devices[0].name == "static_one device");
  CHECK(mine->capabilities.max_single_allocation > 0);  // device 0, opened for the listing
}

TEST_CASE("a name is registered once: a second registration is refused and the first stays") {
  Recording& first = leaked("twice");
  Recording& second = leaked("twice");
  REQUIRE(register_backend("twice", first).ok());
  const Status again = register_backend("twice", second);
  CHECK(again.code() == ErrorCode::unsupported);
  CHECK(again.error().to_string() == "unsupported: registering backend \"twice\": the name is already registered");
  CHECK(register_backend("twice", first).code() == ErrorCode::unsupported);  // even the same plugin

  auto opened = open_backend("twice");
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CHECK(first.opens == 1);
  CHECK(second.opens == 0);

  const auto names = known_backend_names();
  CHECK(std::count(names.begin(), names.end(), "twice") == 1);
  // libballast registered cpu itself, through the same hook.
  CHECK(register_backend("cpu", second).code() == ErrorCode::unsupported);
}

TEST_CASE("registered names follow the first-party ones, sorted, before the plugin files found") {
  REQUIRE(register_backend("order_zz", leaked("order_zz")).ok());
  REQUIRE(register_backend("order_aa", leaked("order_aa")).ok());
  set_plugin_search_path({fake_dir("third_party")});
  const auto names = known_backend_names();
  set_plugin_search_path({});
  const auto at = [&names](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  CHECK(at("vulkan") == 3);
  CHECK(at("order_aa") < at("order_zz"));
  CHECK(at("order_zz") < at("thirdparty"));
  CHECK(at("thirdparty") < static_cast<std::ptrdiff_t>(names.size()));
  CHECK(std::is_sorted(names.begin() + 4, names.begin() + at("thirdparty")));
}

TEST_CASE("a registered name is never looked up as a file, even when one of that name is on the path") {
  Recording& plugin = leaked("shadowed");
  REQUIRE(register_backend("shadowed", plugin).ok());
  set_plugin_search_path({fake_dir("shadowed")});
  const auto names = known_backend_names();
  const auto listing = list_backends();
  auto opened = open_backend("shadowed");
  set_plugin_search_path({});

  CHECK(std::count(names.begin(), names.end(), "shadowed") == 1);
  const BackendListing* mine = find_listing(listing, "shadowed");
  REQUIRE(mine != nullptr);
  CHECK(mine->library == "built in");
  REQUIRE(mine->devices.size() == 1);
  CHECK(mine->devices[0].name == "shadowed device");  // not the fake library's "fake device 0"
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CHECK(plugin.opens == 2);  // the listing's open of device 0, then this one
}

TEST_CASE("registering a name whose plugin file is already loaded is refused") {
  set_plugin_search_path({fake_dir("third_party")});
  auto from_file = open_backend("thirdparty");
  REQUIRE_MESSAGE(from_file.ok(), from_file.status().to_string());
  Recording& plugin = leaked("thirdparty");
  const Status s = register_backend("thirdparty", plugin);
  const auto listing = list_backends();
  set_plugin_search_path({});

  CHECK(s.code() == ErrorCode::unsupported);
  CHECK(s.error().to_string() == "unsupported: registering backend \"thirdparty\": its plugin file " + fake_dir("third_party") +
                                     "/libballast-thirdparty.so is already loaded");
  const BackendListing* listed = find_listing(listing, "thirdparty");
  REQUIRE(listed != nullptr);
  CHECK(listed->library == fake_dir("third_party") + "/libballast-thirdparty.so");
  CHECK(plugin.opens == 0);
}

TEST_CASE("a name whose plugin file failed to load, or is unknown, may still be registered") {
  const auto dir = std::filesystem::temp_directory_path() / ("ballast-register-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "libballast-broken_one.so") << "not a library";
  set_plugin_search_path({dir.string()});
  auto broken = open_backend("broken_one");
  CHECK(broken.code() == ErrorCode::io);  // found, and failed to load
  Recording& plugin = leaked("broken_one");
  const Status s = register_backend("broken_one", plugin);
  auto opened = open_backend("broken_one");
  const auto names = known_backend_names();
  set_plugin_search_path({});
  std::filesystem::remove_all(dir);

  REQUIRE_MESSAGE(s.ok(), s.to_string());
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  CHECK(plugin.opens == 1);
  CHECK(std::count(names.begin(), names.end(), "broken_one") == 1);

  auto unknown = open_backend("later_one");
  CHECK(unknown.code() == ErrorCode::invalid_argument);  // neither registered nor a file
  Recording& later = leaked("later_one");
  REQUIRE(register_backend("later_one", later).ok());
  CHECK(open_backend("later_one").ok());
  CHECK(later.opens == 1);
}

TEST_CASE("registrations from many threads at once, while others list and open") {
  constexpr int kThreads = 8;
  std::vector<Recording*> plugins;
  for (int i = 0; i < kThreads; ++i) plugins.push_back(&leaked("concurrent_" + std::to_string(i)));
  std::atomic<int> registered{0};
  std::atomic<int> opened{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      if (register_backend("concurrent_" + std::to_string(i), *plugins[static_cast<std::size_t>(i)]).ok()) ++registered;
      (void)known_backend_names();
      if (open_backend("concurrent_" + std::to_string(i)).ok()) ++opened;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(registered == kThreads);
  CHECK(opened == kThreads);
  for (int i = 0; i < kThreads; ++i) CHECK(is_known("concurrent_" + std::to_string(i)));
}
