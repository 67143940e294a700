#include "system_info.hpp"

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string_view>
#include <thread>

namespace ballast::cpu {

namespace {

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// FNV-1a, 64 bits, from a chosen offset basis so two calls give two
// independent halves of a 128-bit identifier.
std::uint64_t fnv1a(std::string_view text, std::uint64_t basis) {
  std::uint64_t h = basis;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  return model_name_in(in);
}

std::string model_name_in(std::istream& in) {
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = trim(line.substr(colon + 1));
      if (!name.empty()) return name;
    }
  }
  return "CPU";
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
}

std::string machine_identity(const char* machine_id_path) {
  std::string machine = trim(first_line(machine_id_path));
  if (machine.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) machine = host;
  }
  return machine;
}

std::string cpu_uuid() {
  const std::string seed = "ballast-cpu\n" + machine_identity("/etc/machine-id") + "\n" + cpu_model_name();
  const std::uint64_t hi = fnv1a(seed, 0xcbf29ce484222325ull);
  const std::uint64_t lo = fnv1a(seed, 0x84222325cbf29ce4ull);
  char buf[48];
  std::snprintf(buf, sizeof buf, "GPU-%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xffff), static_cast<unsigned>(hi & 0xffff),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xffffffffffffull));
  return buf;
}

std::uint64_t cache_bytes_in(const std::string& cache_dir, unsigned level) {
  for (int i = 0; i < 16; ++i) {
    const std::string dir = cache_dir + "/index" + std::to_string(i) + "/";
    const std::string lv = trim(first_line((dir + "level").c_str()));
    if (lv.empty()) break;
    if (lv != std::to_string(level) || trim(first_line((dir + "type").c_str())) == "Instruction") continue;
    const std::string size = trim(first_line((dir + "size").c_str()));
    unsigned long long n = 0;
    char unit = 0;
    if (std::sscanf(size.c_str(), "%llu%c", &n, &unit) < 1) continue;
    return unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : unit == 'G' ? n << 30 : n;
  }
  const int name = level == 1 ? _SC_LEVEL1_DCACHE_SIZE : level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE;
  const long bytes = level >= 1 && level <= 3 ? ::sysconf(name) : -1;
  return bytes > 0 ? static_cast<std::uint64_t>(bytes) : 0;
}

std::uint64_t cache_bytes(unsigned level) {
  static constexpr const char* kCpu0 = "/sys/devices/system/cpu/cpu0/cache";
  static const std::uint64_t sizes[4] = {0, cache_bytes_in(kCpu0, 1), cache_bytes_in(kCpu0, 2),
                                         cache_bytes_in(kCpu0, 3)};
  return level >= 1 && level <= 3 ? sizes[level] : 0;
}

unsigned hardware_threads() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return static_cast<unsigned>(CPU_COUNT(&set));
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

}  // namespace ballast::cpu
