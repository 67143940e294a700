// Which files in the plugin folders the loader admits, and that looking at
// them runs nothing (plugin_file.hpp, docs/plugins.md "Which files are
// loaded"). The fake plugins are copied into fresh folders whose owner and
// modes each test sets itself, so the umask of whoever runs it is no factor.
#include "support/text.hpp"
#include "unit/registry/fake_plugins.hpp"
#include "registry/plugin_file.hpp"
#include "registry/plugin_loader.hpp"
#include "registry/registry.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace ballast;
using ballast::registry::PluginCandidate;
using ballast::registry::PluginLoader;
namespace fs = std::filesystem;

namespace {

using ballast::testing::fake_library;

using ballast::testing::contains;

// A fresh folder, mode 0755 whatever the umask, removed at the end.
struct Folder {
  fs::path path;
  Folder() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("ballast-plugin-files-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path);
    ::chmod(path.c_str(), 0755);
  }
  ~Folder() {
    ::chmod(path.c_str(), 0755);
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  // A copy of a fake plugin as <this folder>/libballast-<name>.so, mode 0755.
  std::string plant(const std::string& kind, const std::string& name = "vulkan") const {
    const fs::path to = path / ("libballast-" + name + ".so");
    fs::copy_file(fake_library(kind, name), to, fs::copy_options::overwrite_existing);
    ::chmod(to.c_str(), 0755);
    return to.string();
  }
};

// Runs `body` in a child process and says how it ended within `limit`:
// its exit code, or -1 when it had to be killed. A hang in the code under
// test then fails the test instead of stopping the whole run.
int exit_code_within(const std::function<int()>& body, std::chrono::seconds limit) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(body());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool marker_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) { ::setenv(name.c_str(), value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("listing plugin folders runs nothing of the files in them; loading is asked for by name") {
  Folder scratch;
  const fs::path marker = scratch.path / "marker.txt";
  ScopedEnv env("BALLAST_TEST_MARKER", marker.string());
  const std::string dir = std::string(FAKE_PLUGIN_ROOT) + "/marker";
  PluginLoader loader({dir});

  const auto listing = registry::list_backends(loader);
  CHECK_FALSE(marker_exists(marker));  // the constructor did not run
  const auto* found = &listing.back();
  REQUIRE(found->name == "marker");
  CHECK(found->state == BackendListing::State::found);
  CHECK(backend_state_name(found->state) == "found");
  CHECK(found->library == dir + "/libballast-marker.so");
  CHECK(found->devices.empty());
  CHECK(found->reason.empty());
  CHECK_FALSE(loader.loaded("marker").has_value());

  // Asking for one name loads that one only.
  ListOptions only_cuda;
  only_cuda.load = {"cuda"};
  (void)registry::list_backends(loader, only_cuda);
  CHECK_FALSE(marker_exists(marker));

  ListOptions only_marker;
  only_marker.load = {"marker"};
  const auto loaded = registry::list_backends(loader, only_marker);
  CHECK(marker_exists(marker));
  CHECK(loaded.back().state == BackendListing::State::available);
  CHECK(loaded.back().devices.size() == 2);

  // Once loaded, a plain listing shows it in full: nothing new runs for that.
  const auto again = registry::list_backends(loader);
  CHECK(again.back().state == BackendListing::State::available);
}

TEST_CASE("a FIFO named like a plugin does not hang the load, and a later folder's plugin is used") {
  Folder fifo_dir, good;
  REQUIRE(::mkfifo((fifo_dir.path / "libballast-vulkan.so").c_str(), 0644) == 0);
  const std::string good_path = good.plant("working");
  const int code = exit_code_within(
      [&] {
        PluginLoader loader({fifo_dir.str(), good.str()});
        auto loaded = loader.load("vulkan");
        if (!loaded.ok()) return 2;
        if (loaded->library != good_path) return 3;
        auto reports = loader.probe("vulkan");
        if (reports.size() != 2 || reports[0].verdict != PluginCandidate::Verdict::refused) return 4;
        if (reports[0].reason != "a FIFO") return 5;
        return 0;
      },
      std::chrono::seconds(20));
  CHECK_MESSAGE(code != -1, "loading hung on the FIFO (killed after 20 s)");
  CHECK(code == 0);

  // The listing, too, says why without opening it for reading.
  PluginLoader loader({fifo_dir.str()});
  const int listed = exit_code_within(
      [&] {
        const auto listing = registry::list_backends(loader);
        const auto& v = listing[3];
        return v.state == BackendListing::State::refused && v.refused.size() == 1 && contains(v.refused[0], "a FIFO")
                   ? 0
                   : 1;
      },
      std::chrono::seconds(20));
  CHECK(listed == 0);
}

TEST_CASE("a plugin file or folder writable by group or others is refused with why, and a later folder's plugin loads") {
  struct Row {
    const char* what;
    mode_t file_mode;
    mode_t folder_mode;
    const char* reason;
  };
  const Row rows[] = {
      {"group-writable file", 0775, 0755, "file writable by group (mode 0775; chmod go-w makes it admissible)"},
      {"world-writable file", 0757, 0755, "file writable by others (mode 0757; chmod go-w makes it admissible)"},
      {"group-writable folder", 0755, 0775, "folder writable by group (mode 0775; chmod go-w makes it admissible)"},
      {"world-writable sticky folder", 0755, 01777,
       "folder writable by group and others (mode 1777; chmod go-w makes it admissible)"},
  };
  Folder good;
  const std::string good_path = good.plant("working");
  for (const auto& row : rows) {
    CAPTURE(row.what);
    Folder bad;
    const std::string bad_path = bad.plant("working");
    REQUIRE(::chmod(bad_path.c_str(), row.file_mode) == 0);
    REQUIRE(::chmod(bad.path.c_str(), row.folder_mode) == 0);

    PluginLoader loader({bad.str(), good.str()});
    const auto reports = loader.probe("vulkan");
    REQUIRE(reports.size() == 2);
    CHECK(reports[0].verdict == PluginCandidate::Verdict::refused);
    CHECK(reports[0].reason == row.reason);
    CHECK(reports[1].verdict == PluginCandidate::Verdict::admitted);

    const auto listing = registry::list_backends(loader);
    CHECK(listing[3].state == BackendListing::State::found);
    CHECK(listing[3].library == good_path);
    CHECK(listing[3].refused == std::vector<std::string>{bad_path + ": " + row.reason});

    auto loaded = loader.load("vulkan");
    REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
    CHECK(loaded->library == good_path);

    // Alone, it is not loaded, and the error says why.
    PluginLoader alone({bad.str()});
    auto refused = alone.load("vulkan");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.code() == ErrorCode::not_found);
    CHECK(contains(refused.error().message, "refused: " + bad_path + " (" + row.reason + ")"));
    ListOptions all;
    all.load_all = true;
    const auto listed = registry::list_backends(alone, all);
    CHECK(listed[3].state == BackendListing::State::refused);
    CHECK(listed[3].refused == std::vector<std::string>{bad_path + ": " + row.reason});
    CHECK(listed[3].searched == std::vector<std::string>{bad_path});
  }
}

TEST_CASE("a plugin file owned by someone other than root or the running user is refused") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: giving a file away needs root");
    return;
  }
  Folder bad, good;
  const std::string bad_path = bad.plant("working");
  good.plant("working");
  REQUIRE(::chown(bad_path.c_str(), 4242, 4242) == 0);
  PluginLoader loader({bad.str(), good.str()});
  const auto reports = loader.probe("vulkan");
  CHECK(reports[0].reason == "file owned by uid 4242, neither root nor the running user (uid 0)");
  REQUIRE(::chown(bad_path.c_str(), 0, 0) == 0);
  REQUIRE(::chown(bad.path.c_str(), 4242, 4242) == 0);
  CHECK(loader.probe("vulkan")[0].reason == "folder owned by uid 4242, neither root nor the running user (uid 0)");
  auto loaded = loader.load("vulkan");
  REQUIRE(loaded.ok());
  CHECK(loaded->library == (good.path / "libballast-vulkan.so").string());
}

TEST_CASE("a plugin file and folder owned by the running user, not root, are admitted") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: running as another user needs root");
    return;
  }
  // The owner rule admits root's files and the running user's: a child
  // that runs as uid 4242 probes a folder and a file that uid owns.
  Folder mine;
  const std::string file = mine.plant("working");
  REQUIRE(::chown(file.c_str(), 4242, 4242) == 0);
  REQUIRE(::chown(mine.path.c_str(), 4242, 4242) == 0);
  const int code = exit_code_within(
      [&] {
        if (::setegid(4242) != 0 || ::seteuid(4242) != 0) return 3;
        const auto reports = PluginLoader({mine.str()}).probe("vulkan");
        if (reports.size() != 1) return 2;
        return reports[0].verdict == PluginCandidate::Verdict::admitted && reports[0].reason.empty() ? 0 : 1;
      },
      std::chrono::seconds(30));
  CHECK(code == 0);  // 1: refused, 2: not found, 3: could not become uid 4242
  REQUIRE(::chown(mine.path.c_str(), 0, 0) == 0);
}

TEST_CASE("a symlink named like a plugin is refused, even to a good plugin, and never hides a later one") {
  Folder links, good;
  const std::string good_path = good.plant("working");
  fs::create_symlink(good_path, links.path / "libballast-vulkan.so");
  PluginLoader alone({links.str()});
  CHECK(alone.discover() == std::vector<std::string>{"vulkan"});  // listed, so the refusal is visible
  auto refused = alone.load("vulkan");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.code() == ErrorCode::not_found);
  CHECK(contains(refused.error().message, (links.path / "libballast-vulkan.so").string() + " (a symlink"));

  PluginLoader loader({links.str(), good.str()});
  auto loaded = loader.load("vulkan");
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  CHECK(loaded->library == good_path);
}

TEST_CASE("a relative search folder is made absolute when set: a later chdir still finds the plugin") {
  Folder root, elsewhere;
  fs::create_directories(root.path / "rel" / "plugins");
  ::chmod((root.path / "rel").c_str(), 0755);
  ::chmod((root.path / "rel" / "plugins").c_str(), 0755);
  fs::copy_file(fake_library("working"), root.path / "rel" / "plugins" / "libballast-vulkan.so");
  ::chmod((root.path / "rel" / "plugins" / "libballast-vulkan.so").c_str(), 0755);
  // A plugin of the same name where the relative folder would point after the chdir.
  fs::create_directories(elsewhere.path / "rel" / "plugins");
  fs::copy_file(fake_library("wrong_abi"), elsewhere.path / "rel" / "plugins" / "libballast-vulkan.so");

  const fs::path old = fs::current_path();
  fs::current_path(root.path);
  PluginLoader loader({"rel/plugins"});
  set_plugin_search_path({"rel/plugins"});
  fs::current_path(elsewhere.path);
  const auto dirs = loader.search_dirs();
  const auto process_dirs = plugin_search_paths();
  auto loaded = loader.load("vulkan");
  set_plugin_search_path({});
  fs::current_path(old);

  const std::string expected = (root.path / "rel" / "plugins").string();
  CHECK(dirs == std::vector<std::string>{expected});
  CHECK(std::find(process_dirs.begin(), process_dirs.end(), expected) != process_dirs.end());
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  CHECK(loaded->library == expected + "/libballast-vulkan.so");
}

TEST_CASE("check_plugin_candidate: absent, a directory, an unreadable file, and an admitted file's descriptor") {
  Folder dir;
  CHECK(registry::check_plugin_candidate(dir.str(), "libballast-none.so").verdict == PluginCandidate::Verdict::absent);
  CHECK(registry::check_plugin_candidate((dir.path / "missing").string(), "libballast-none.so").verdict ==
        PluginCandidate::Verdict::absent);
  fs::create_directory(dir.path / "libballast-folder.so");
  const auto folder = registry::check_plugin_candidate(dir.str(), "libballast-folder.so");
  CHECK(folder.verdict == PluginCandidate::Verdict::refused);
  CHECK(folder.reason == "a directory");

  const std::string path = dir.plant("working");
  auto admitted = registry::check_plugin_candidate(dir.str(), "libballast-vulkan.so");
  REQUIRE(admitted.verdict == PluginCandidate::Verdict::admitted);
  CHECK(admitted.path == path);
  struct stat by_fd {}, by_name {};
  REQUIRE(::fstat(admitted.file.get(), &by_fd) == 0);
  REQUIRE(::stat(path.c_str(), &by_name) == 0);
  CHECK(by_fd.st_ino == by_name.st_ino);
  CHECK((::fcntl(admitted.file.get(), F_GETFD) & FD_CLOEXEC) != 0);
}

TEST_CASE("a plugin file that is not a shared object: dlopen's own reason is in the error") {
  Folder dir;
  const fs::path file = dir.path / "libballast-junk.so";
  {
    std::ofstream out(file, std::ios::binary);
    out << "not an ELF file at all";
  }
  ::chmod(file.c_str(), 0755);
  auto admitted = registry::check_plugin_candidate(dir.str(), "libballast-junk.so");
  REQUIRE(admitted.verdict == PluginCandidate::Verdict::admitted);
  auto opened = registry::open_checked_library(std::move(admitted));
  REQUIRE_FALSE(opened.ok());
  CHECK(opened.error().code == ErrorCode::io);
  CHECK(opened.error().file == file.string());
  const std::string message = opened.error().message;
  CAPTURE(message);
  CHECK(message.find("dlopen failed for " + file.string()) != std::string::npos);
  CHECK(message.find("unknown reason") == std::string::npos);  // glibc says why ("invalid ELF header", ...)
}
