// `derive --dump` writes beneath one directory handle: planted symlinks are
// not followed, distinct weights never share a file, long names fit.
#include "support/npy.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace cli = ballast::cli;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(BALLAST_BINARY_DIR) / "scratch" / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::byte> payload(char c) { return std::vector<std::byte>(16, static_cast<std::byte>(c)); }

}  // namespace

TEST_CASE("a symlink planted in the dump directory is not followed; its target is untouched") {
  const fs::path root = fresh_dir("dump-symlink");
  const fs::path victim = root / "victim.txt";
  std::ofstream(victim) << "keep me";
  auto dir = cli::DumpDirectory::open(root / "dump");
  REQUIRE(dir.ok());
  const std::string name = cli::DumpDirectory::file_name("layer0.weight", "f16");
  fs::create_symlink(victim, root / "dump" / name);
  auto written = dir->write_npy("layer0.weight", "f16", "<f2", {8}, payload('a'));
  REQUIRE_FALSE(written.ok());
  CHECK(written.error().message.find("symlink") != std::string::npos);
  CHECK(slurp(victim) == "keep me");
  CHECK(fs::is_symlink(root / "dump" / name));
  fs::remove_all(root);
}

TEST_CASE("names that differ only in '/' vs '_' get distinct files") {
  const fs::path root = fresh_dir("dump-collide");
  auto dir = cli::DumpDirectory::open(root);
  REQUIRE(dir.ok());
  auto a = dir->write_npy("model/layer.w", "t", "|u1", {16}, payload('a'));
  auto b = dir->write_npy("model_layer.w", "t", "|u1", {16}, payload('b'));
  auto c = dir->write_npy("model:layer.w", "t", "|u1", {16}, payload('c'));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  CHECK(*a != *b);
  CHECK(*a != *c);
  CHECK(*b == root / "model_layer.w.t.npy");  // an already safe name is kept as it is
  CHECK(slurp(*a).back() == 'a');
  CHECK(slurp(*b).back() == 'b');
  CHECK(slurp(*c).back() == 'c');
  // One name twice in one run is refused, not overwritten.
  CHECK_FALSE(dir->write_npy("model/layer.w", "t", "|u1", {16}, payload('d')).ok());
  CHECK(slurp(*a).back() == 'a');
  fs::remove_all(root);
}

TEST_CASE("a 300-byte weight name gets a bounded, unique file name; a rerun replaces its own files") {
  const fs::path root = fresh_dir("dump-long");
  const std::string long_a(300, 'a');
  const std::string long_b = std::string(299, 'a') + "b";
  {
    auto dir = cli::DumpDirectory::open(root);
    REQUIRE(dir.ok());
    auto a = dir->write_npy(long_a, "t", "|u1", {16}, payload('1'));
    auto b = dir->write_npy(long_b, "t", "|u1", {16}, payload('2'));
    REQUIRE_MESSAGE(a.ok(), a.error().to_string());
    REQUIRE(b.ok());
    CHECK(a->filename().string().size() <= 255);
    CHECK(*a != *b);
  }
  auto again = cli::DumpDirectory::open(root);
  REQUIRE(again.ok());
  auto a = again->write_npy(long_a, "t", "|u1", {16}, payload('3'));
  REQUIRE(a.ok());
  CHECK(slurp(*a).back() == '3');
  fs::remove_all(root);
}
