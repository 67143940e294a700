// The communicator ABI's versions (comm_plugin.h), with fake libraries in
// C (fake_comm.c): a 1.0 library (no exchange) loads and gets rounds built
// from its messages; a 1.1 library of rounds only loads, says so and
// refuses send; another major is refused naming both versions; a library
// with half of messages and no exchange is refused; a loaded library stays
// the one used and named after the search path changes.
#include <ballast/comm_plugin.h>
#include <ballast/backend_registry.hpp>
#include <ballast/communicator.hpp>

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

using namespace ballast;
using namespace std::chrono_literals;

namespace {

struct PluginPath {
  PluginPath() { ::setenv("BALLAST_PLUGIN_PATH", FAKE_COMM_DIR, 1); }
  ~PluginPath() { ::unsetenv("BALLAST_PLUGIN_PATH"); }
};

std::vector<std::vector<std::byte>> one(std::size_t size) {
  std::vector<std::vector<std::byte>> to(1);
  for (std::size_t i = 0; i < size; ++i) to[0].push_back(std::byte(i * 7));
  return to;
}

}  // namespace

TEST_CASE("communicator ABI 1.0: loads; its rounds are built from its messages") {
  PluginPath path;
  auto c = open_communicator("fakeold");
  REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  CHECK((*c)->any_source());
  CHECK((*c)->world() == 1);
  auto round = (*c)->exchange(one(5), std::chrono::steady_clock::now() + 1s);
  REQUIRE_MESSAGE(round.ok(), round.error().to_string());
  CHECK((*round)[0] == one(5)[0]);
  CHECK((*c)->barrier(std::chrono::steady_clock::now() + 1s).ok());
}

TEST_CASE("communicator ABI 1.1, rounds only: loads, answers any_source false, refuses send, exchanges") {
  PluginPath path;
  auto c = open_communicator("fakerounds");
  REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  CHECK_FALSE((*c)->any_source());
  const Status sent = (*c)->send(0, {});
  CHECK(sent.code() == ErrorCode::unsupported);
  CHECK((*c)->receive(std::chrono::steady_clock::now()).error().code == ErrorCode::unsupported);
  auto round = (*c)->exchange(one(300), std::chrono::steady_clock::now() + 1s);
  REQUIRE_MESSAGE(round.ok(), round.error().to_string());
  CHECK((*round)[0] == one(300)[0]);
  (*c)->fail(make_error(ErrorCode::io, "gone"));
  auto after = (*c)->exchange(one(1), std::chrono::steady_clock::now() + 1s);
  REQUIRE_FALSE(after.ok());
  CHECK(after.error().code == ErrorCode::unavailable);
}

TEST_CASE("communicator ABI: another major is refused naming both versions; half of messages is refused") {
  PluginPath path;
  auto next = open_communicator("fakenext");
  REQUIRE_FALSE(next.ok());
  CHECK(next.error().code == ErrorCode::abi_mismatch);
  const std::string text = next.error().to_string();
  CHECK_MESSAGE(text.find("communicator ABI 2.0") != std::string::npos, text);
  CHECK_MESSAGE(text.find("takes " + std::to_string(BALLAST_COMM_API_MAJOR) + ".x") != std::string::npos, text);
  auto half = open_communicator("fakehalf");
  REQUIRE_FALSE(half.ok());
  CHECK(half.error().code == ErrorCode::abi_mismatch);
  CHECK_MESSAGE(half.error().to_string().find("lacks a function") != std::string::npos, half.error().to_string());
}

TEST_CASE("communicator names: lower-case letters, every digit and '_' look for a library; anything else is refused") {
  PluginPath path;
  // A plain name with no library is not_found (every folder searched named),
  // whichever digits it holds, up to 32 characters long.
  for (const char* name : {"nosuch0", "nosuch9", "no_such_09", "a2345678901234567890123456789012"}) {
    CAPTURE(name);
    auto c = open_communicator(name);
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code == ErrorCode::not_found);
  }
  for (const char* name : {"NoSuch", "no-such", "no/such", "", "a23456789012345678901234567890123"}) {
    CAPTURE(name);
    auto c = open_communicator(name);
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().code == ErrorCode::invalid_argument);
  }
}

TEST_CASE("communicators are looked for in set_plugin_search_path's folders; a loaded one stays the one named") {
  // Copies of fakeold and fakenext in another folder, set with
  // set_plugin_search_path after fakeold was loaded from FAKE_COMM_DIR:
  // fakenext (never loaded) is found in the new folder; fakeold stays the
  // loaded library, and find_communicator names its file, not the copy.
  const std::string dir = FAKE_COMM_DIR;
  {
    PluginPath path;
    auto c = open_communicator("fakeold");
    REQUIRE_MESSAGE(c.ok(), c.error().to_string());
  }
  char folder[] = "/tmp/ballast_comm_copyXXXXXX";
  REQUIRE(::mkdtemp(folder) != nullptr);
  for (const char* name : {"fakeold", "fakenext"}) {
    const std::string file = std::string("/libballast_comm_") + name + ".so";
    {
      std::ifstream in(dir + file, std::ios::binary);
      std::ofstream out(folder + file, std::ios::binary);
      out << in.rdbuf();
    }
    REQUIRE(::chmod((folder + file).c_str(), 0755) == 0);
  }
  const auto before = plugin_search_paths();
  set_plugin_search_path({folder});  // BALLAST_PLUGIN_PATH is unset here
  auto loaded = find_communicator("fakeold");
  auto again = open_communicator("fakeold");
  auto unloaded = find_communicator("fakenext");
  set_plugin_search_path(before);
  for (const char* name : {"fakeold", "fakenext"})
    std::remove((folder + std::string("/libballast_comm_") + name + ".so").c_str());
  ::rmdir(folder);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  CHECK(*loaded == dir + "/libballast_comm_fakeold.so");
  REQUIRE_MESSAGE(again.ok(), again.error().to_string());
  REQUIRE_MESSAGE(unloaded.ok(), unloaded.error().to_string());
  CHECK(*unloaded == folder + std::string("/libballast_comm_fakenext.so"));
}
