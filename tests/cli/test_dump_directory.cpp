// `derive --dump` writes beneath one directory handle: planted symlinks are
// not followed, distinct weights never share a file, long names fit, and a
// file appears under its name only whole.
#include "support/npy.hpp"

#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
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

// `load|derive --comm --dump DIR` writes each rank under DIR/rank<R>: a
// `rank0` symlink planted in DIR sent every file of rank 0 to its target.
TEST_CASE("a .npy header spells the shape as NumPy does: (), (5,), (3, 4), (2, 3, 4)") {
  // A reader that counts dimensions by the commas (one when the tuple ends
  // in a comma) must read the rank right: "(5, )" is not one dimension to
  // it, and "(3, 4,)" is.
  const fs::path root = fresh_dir("dump-npy-header");
  auto dir = cli::DumpDirectory::open(root);
  REQUIRE(dir.ok());
  const std::vector<std::pair<std::vector<std::uint64_t>, std::string>> cases = {
      {{}, "()"}, {{5}, "(5,)"}, {{3, 4}, "(3, 4)"}, {{2, 3, 4}, "(2, 3, 4)"}};
  for (const auto& [shape, tuple] : cases) {
    CAPTURE(tuple);
    std::uint64_t elements = 1;
    for (std::uint64_t d : shape) elements *= d;
    const std::vector<std::byte> data(elements * 4, std::byte{0x5a});
    auto path = dir->write_npy("w" + std::to_string(shape.size()), "f32", "<f4", shape, data);
    REQUIRE(path.ok());
    const std::string file = slurp(*path);
    REQUIRE(file.size() > 10);
    CHECK(file.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
    const std::size_t length = static_cast<unsigned char>(file[8]) | (static_cast<unsigned char>(file[9]) << 8);
    CHECK((10 + length) % 64 == 0);
    REQUIRE(file.size() == 10 + length + data.size());
    const std::string header = file.substr(10, length);
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + tuple + ", }";
    CHECK(header.substr(0, dict.size()) == dict);
    CHECK(header.find_first_not_of(' ', dict.size()) == length - 1);
    CHECK(header.back() == '\n');
  }
  fs::remove_all(root);
}

TEST_CASE("a rank's folder is opened beneath the dump directory, never through a planted symlink") {
  const fs::path root = fresh_dir("dump-rank-symlink");
  const fs::path elsewhere = root / "elsewhere";
  fs::create_directories(elsewhere);
  fs::create_directories(root / "dump");
  fs::create_directory_symlink(elsewhere, root / "dump" / "rank0");
  auto planted = cli::DumpDirectory::open(root / "dump", "rank0");
  REQUIRE_FALSE(planted.ok());
  CHECK(planted.error().code == ballast::ErrorCode::io);
  CHECK(planted.error().message.find("not a symlink") != std::string::npos);
  CHECK(fs::is_empty(elsewhere));
  // A folder of its own is made (or reused) and written beneath.
  for (int run = 0; run < 2; ++run) {
    auto rank1 = cli::DumpDirectory::open(root / "dump", "rank1");
    REQUIRE(rank1.ok());
    CHECK(rank1->path() == root / "dump" / "rank1");
    REQUIRE(rank1->write_npy("w", "shard", "|u1", {16}, payload('b')).ok());
    CHECK(fs::is_regular_file(root / "dump" / "rank1" / cli::DumpDirectory::file_name("w", "shard")));
  }
  // A name that is no single folder's is refused as such, not with
  // whatever errno an earlier call left.
  for (const char* bad : {"..", ".", "rank0/x"}) {
    CAPTURE(bad);
    errno = 0;
    auto refused = cli::DumpDirectory::open(root / "dump", bad);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ballast::ErrorCode::io);
    CHECK_MESSAGE(refused.error().message.find(std::strerror(EINVAL)) != std::string::npos, refused.error().message);
  }
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

// An .npy whose header is whole and is followed by `size` bytes of one value.
bool whole_npy(const std::string& bytes, std::size_t size) {
  if (bytes.size() < 10) return false;
  const std::size_t header = 10 + (static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8);
  if (bytes.size() != header + size || bytes[header - 1] != '\n') return false;
  return bytes.find_first_not_of(bytes.back(), header) == std::string::npos;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("a write cut short (a file size limit) leaves the earlier run's file whole and no temporary") {
  // The file used to be created under its final name and written in place:
  // an earlier run's file was unlinked first, and the failed write left a
  // truncated .npy that numpy.load refuses (or a core dump, SIGXFSZ).
  const fs::path root = fresh_dir("dump-fsize");
  const std::size_t size = 64 << 10;
  {
    auto dir = cli::DumpDirectory::open(root);
    REQUIRE(dir.ok());
    REQUIRE(dir->write_npy("w", "t", "|u1", {size}, std::vector<std::byte>(size, std::byte{'a'})).ok());
  }
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const rlimit limit{4096, 4096};  // SIGXFSZ left at its default action
    ::setrlimit(RLIMIT_FSIZE, &limit);
    auto dir = cli::DumpDirectory::open(root);
    if (!dir.ok()) ::_exit(3);
    auto w = dir->write_npy("w", "t", "|u1", {size}, std::vector<std::byte>(size, std::byte{'b'}));
    ::_exit(w.ok() ? 1 : w.error().message.find("too large") != std::string::npos ? 0 : 2);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK_MESSAGE(WIFEXITED(status), "the writer died of signal ", WTERMSIG(status));
  CHECK(WEXITSTATUS(status) == 0);  // an io error naming EFBIG
  const std::string after = slurp(root / "w.t.npy");
  CHECK(whole_npy(after, size));
  CHECK(after.back() == 'a');
  CHECK(names_in(root) == std::vector<std::string>{"w.t.npy"});
  fs::remove_all(root);
}

TEST_CASE("two runs dumping into one directory at once: each succeeds, a reader only ever sees whole files") {
  // The second run used to unlink the first's file and create its own: the
  // first then failed its create with EEXIST, and a reader could open a
  // file still being written.
  const fs::path root = fresh_dir("dump-two-runs");
  const std::size_t size = 64 << 10;
  constexpr int kNames = 12;
  constexpr int kRounds = 15;
  std::atomic<bool> writing{true};
  std::atomic<int> failures{0}, torn{0}, seen{0};
  const auto run = [&](char c) {
    const std::vector<std::byte> data(size, static_cast<std::byte>(c));
    for (int round = 0; round < kRounds; ++round) {
      auto dir = cli::DumpDirectory::open(root);
      if (!dir.ok()) {
        ++failures;
        continue;
      }
      for (int n = 0; n < kNames; ++n)
        if (!dir->write_npy("w" + std::to_string(n), "t", "|u1", {size}, data).ok()) ++failures;
    }
  };
  std::thread reader([&] {
    while (writing.load()) {
      for (int n = 0; n < kNames; ++n) {
        const fs::path p = root / ("w" + std::to_string(n) + ".t.npy");
        std::error_code ec;
        if (!fs::exists(p, ec)) continue;
        ++seen;
        if (!whole_npy(slurp(p), size)) ++torn;
      }
    }
  });
  std::thread a(run, 'a'), b(run, 'b');
  a.join();
  b.join();
  writing = false;
  reader.join();
  CHECK(failures.load() == 0);
  CHECK(torn.load() == 0);
  CHECK(seen.load() > 0);
  const std::vector<std::string> names = names_in(root);
  CHECK(names.size() == kNames);  // no temporary left
  for (const std::string& name : names) CHECK(whole_npy(slurp(root / name), size));
  fs::remove_all(root);
}
