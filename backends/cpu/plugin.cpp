// The CPU backend's entry: its BackendPlugin, and how it reaches the
// registry. Built into libballast (the default) it registers itself as
// "cpu" through the public register_backend() hook an engine's own backend
// uses, so the registry (core/) knows nothing about it. Built as a plugin
// file (BALLAST_CPU_PLUGIN_NAME defined: ballast's ABI tests build copies
// with another compiler and as plugin ABI 1.0) it exports the plugin entry
// under that name instead. Either way the core sees only the C tables of
// plugin_api.h. Config options (after '?'):
//   threads=N   worker threads including the caller, 1..1024 (default: all
//               hardware threads this process may run on)
//   simd=on|avx2|off  off forces the portable kernels, avx2 the AVX2 ones
//               where the CPU also has AVX-512 (for comparison/debugging)
//   retain_mib=N  MiB of freed large blocks kept mapped for the next
//               allocations, 0..1048576 (default: 1024, or 1/16 of
//               physical memory if that is less; allocator.hpp says why)
#include "plugin.hpp"
#include "backend.hpp"
#include "system_info.hpp"

#include <algorithm>
#include <charconv>
#include <string>

#ifdef BALLAST_CPU_PLUGIN_NAME
#define BALLAST_CPU_NAME_ BALLAST_CPU_PLUGIN_NAME
#else
#define BALLAST_CPU_NAME_ "cpu"
#endif

namespace ballast::cpu {

namespace {

constexpr const char* kName = BALLAST_CPU_NAME_;
constexpr const char* kKnownKeys = "threads, simd, retain_mib";

std::uint64_t default_retain_bytes(std::uint64_t memory) { return std::min<std::uint64_t>(1ull << 30, memory / 16); }

Result<DeviceOptions> parse_options(const BackendConfig& config) {
  DeviceOptions o;
  for (const auto& [key, value] : config.options) {
    if (key == "threads") {
      unsigned n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n < 1 || n > 1024)
        return make_error(ErrorCode::invalid_argument, "cpu option threads=" + value + ": expected a whole number from 1 to 1024");
      o.threads = n;
    } else if (key == "simd") {
      if (value != "on" && value != "off" && value != "avx2")
        return make_error(ErrorCode::invalid_argument, "cpu option simd=" + value + ": expected on, avx2 or off");
      o.simd = value != "off";
      o.avx512 = value == "on";
    } else if (key == "retain_mib") {
      std::uint64_t mib = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), mib);
      if (ec != std::errc() || end != value.data() + value.size() || mib > (1ull << 20))
        return make_error(ErrorCode::invalid_argument,
                          "cpu option retain_mib=" + value + ": expected a whole number from 0 to 1048576");
      o.retain_bytes = mib << 20;
    } else {
      return make_error(ErrorCode::invalid_argument,
                        "unknown cpu option '" + key + "'; known keys: " + std::string(kKnownKeys));
    }
  }
  return o;
}

class CpuPlugin final : public BackendPlugin {
 public:
  CpuPlugin() {
    info_.backend = kName;
    info_.index = 0;
    info_.name = cpu_model_name();
    info_.uuid = cpu_uuid();
    info_.driver = "none: built into libballast";
    info_.memory_bytes = physical_memory_bytes();
    caps_.host_registration = true;
    caps_.read_only_registration = true;
    caps_.import_alignment = 1;
    caps_.max_single_allocation = info_.memory_bytes;
    caps_.flushes_f16_subnormals = false;
  }

  Result<std::vector<DeviceInfo>> devices() override { return std::vector<DeviceInfo>{info_}; }

  Result<std::unique_ptr<BackendDevice>> open(const BackendConfig& config) override {
    // The registry says "opening backend ..." once; no second context here.
    if (!config.name.empty() && config.name != kName)
      return make_error(ErrorCode::invalid_argument, "the cpu plugin cannot open backend '" + config.name + "'");
    if (config.device_index && *config.device_index != 0)
      return make_error(ErrorCode::not_found, "cpu has one device, index 0; there is no device " +
                                                  std::to_string(*config.device_index));
    if (config.device_uuid && *config.device_uuid != info_.uuid)
      return make_error(ErrorCode::not_found, "no cpu device with UUID " + *config.device_uuid + "; this one is " + info_.uuid);
    auto options = parse_options(config);
    if (!options) return options.error();
    if (options->threads == 0) options->threads = hardware_threads();
    if (!options->retain_bytes) options->retain_bytes = default_retain_bytes(info_.memory_bytes);
    try {
      return std::unique_ptr<BackendDevice>(std::make_unique<CpuDevice>(info_, caps_, *options));
    } catch (const std::exception& e) {  // thread creation or memory: never across the boundary
      return make_error(ErrorCode::out_of_memory, std::string("cannot start the cpu device: ") + e.what());
    }
  }

 private:
  DeviceInfo info_;
  Capabilities caps_;
};

}  // namespace

BackendPlugin& plugin() {
  static CpuPlugin instance;
  return instance;
}

}  // namespace ballast::cpu

#ifdef BALLAST_CPU_PLUGIN_NAME

BALLAST_PLUGIN_ENTRY(BALLAST_CPU_PLUGIN_NAME, &ballast::cpu::plugin());

#else

namespace ballast::cpu {
namespace {

// What the registry holds: forwards to plugin(), so that loading libballast
// does no work (the CPU model, the memory size) until the backend is used.
class LazyCpuPlugin final : public BackendPlugin {
 public:
  Result<std::vector<DeviceInfo>> devices() override { return plugin().devices(); }
  Result<std::unique_ptr<BackendDevice>> open(const BackendConfig& config) override { return plugin().open(config); }
};

// Runs while libballast is loaded, before any code of the program that
// loads it: "cpu" is a valid name, registered first, so this cannot fail.
struct Registrar {
  Registrar() {
    static LazyCpuPlugin* const registered = new LazyCpuPlugin();  // the registry keeps it until exit
    const Status s = register_backend("cpu", *registered);
    static_cast<void>(s);
  }
};
const Registrar registrar;

}  // namespace

}  // namespace ballast::cpu

#endif
