// What the CPU backend reads about its machine: the model name it reports,
// the identity its UUID hashes and the cache sizes its kernels size their
// tiles by, against fixtures (a generated mutant in each of these readers
// passed every other test: the tiles only change speed).
#include "cpu_test_support.hpp"

#include "cpu/system_info.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

namespace fs = std::filesystem;
using namespace ballast::cpu;

namespace {

// A fresh directory under the test's temporary directory, removed with it.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("ballast_sysinfo_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// One sysfs cache entry: index<i>/{level,type,size}.
void cache_entry(const fs::path& dir, int i, const std::string& level, const std::string& type,
                 const std::string& size) {
  const fs::path d = dir / ("index" + std::to_string(i));
  write(d / "level", level + "\n");
  write(d / "type", type + "\n");
  if (!size.empty()) write(d / "size", size + "\n");
}

std::uint64_t sysconf_bytes(int name) {
  const long v = ::sysconf(name);
  return v > 0 ? static_cast<std::uint64_t>(v) : 0;
}

}  // namespace

TEST_CASE("the model name is the first non-empty \"model name\" value, trimmed; \"CPU\" without one") {
  std::istringstream amd(
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t:  AMD EPYC 9B45 \t\nflags\t\t: fpu\n");
  CHECK(model_name_in(amd) == "AMD EPYC 9B45");
  std::istringstream blank_first("model name\t:   \nmodel name\t: Intel(R) Xeon(R) Processor\n");
  CHECK(model_name_in(blank_first) == "Intel(R) Xeon(R) Processor");
  std::istringstream no_colon("model name without a colon\nmodel name: x:y\n");
  CHECK(model_name_in(no_colon) == "x:y");
  std::istringstream none("processor\t: 0\nmodel\t\t: 17\n");
  CHECK(model_name_in(none) == "CPU");
  std::istringstream empty("");
  CHECK(model_name_in(empty) == "CPU");
}

TEST_CASE("the UUID hashes the machine id, or the host name without one, and has the uniform form") {
  TempDir dir("uuid");
  write(dir.path / "machine-id", "  0123456789abcdef0123456789abcdef \n");
  CHECK(machine_identity((dir.path / "machine-id").c_str()) == "0123456789abcdef0123456789abcdef");
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof host - 1) == 0);
  CHECK(machine_identity((dir.path / "absent").c_str()) == std::string(host));
  write(dir.path / "empty", "\n");
  CHECK(machine_identity((dir.path / "empty").c_str()) == std::string(host));

  const std::string uuid = cpu_uuid();
  CHECK(std::regex_match(uuid, std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")));
  CHECK(cpu_uuid() == uuid);
}

TEST_CASE("cache sizes: the data or unified cache of each level, in bytes or K/M/G; sysconf where sysfs has none") {
  TempDir dir("cache");
  const fs::path c = dir.path / "cache";
  // The instruction cache of level 1 comes first and must be skipped.
  cache_entry(c, 0, "1", "Instruction", "32K");
  cache_entry(c, 1, "1", "Data", "48K");
  cache_entry(c, 2, "2", "Unified", "2048K");
  cache_entry(c, 3, "3", "Unified", "32M");
  CHECK(cache_bytes_in(c.string(), 1) == 48u << 10);
  CHECK(cache_bytes_in(c.string(), 2) == 2u << 20);
  CHECK(cache_bytes_in(c.string(), 3) == 32u << 20);

  // A size without a unit is bytes; one with G is GiB; an entry with no
  // size is passed over for the next of its level.
  const fs::path u = dir.path / "units";
  cache_entry(u, 0, "2", "Unified", "");
  cache_entry(u, 1, "2", "Unified", "1048576");
  cache_entry(u, 2, "3", "Unified", "1G");
  CHECK(cache_bytes_in(u.string(), 2) == 1048576u);
  CHECK(cache_bytes_in(u.string(), 3) == std::uint64_t{1} << 30);
  // Levels sysfs does not describe here, and a directory that does not
  // exist: sysconf's answer for levels 1 to 3, nothing for others.
  CHECK(cache_bytes_in(u.string(), 1) == sysconf_bytes(_SC_LEVEL1_DCACHE_SIZE));
  const std::string absent = (dir.path / "absent").string();
  CHECK(cache_bytes_in(absent, 1) == sysconf_bytes(_SC_LEVEL1_DCACHE_SIZE));
  CHECK(cache_bytes_in(absent, 2) == sysconf_bytes(_SC_LEVEL2_CACHE_SIZE));
  CHECK(cache_bytes_in(absent, 3) == sysconf_bytes(_SC_LEVEL3_CACHE_SIZE));
  CHECK(cache_bytes_in(absent, 0) == 0);
  CHECK(cache_bytes_in(absent, 4) == 0);
}

TEST_CASE("cache_bytes is this machine's cpu0 for levels 1 to 3, and 0 for any other") {
  const std::string cpu0 = "/sys/devices/system/cpu/cpu0/cache";
  for (unsigned level = 1; level <= 3; ++level) {
    INFO("level " << level);
    CHECK(cache_bytes(level) == cache_bytes_in(cpu0, level));
  }
  CHECK(cache_bytes(0) == 0);
  CHECK(cache_bytes(4) == 0);
}
