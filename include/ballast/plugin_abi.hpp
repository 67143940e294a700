// The contract between the registry and a backend plugin library
// (libballast-<name>.so). Only for backend authors; engines never include it.
//
// A plugin exports one C symbol, `ballast_plugin_descriptor`, returning a
// descriptor whose plain-C fields are checked BEFORE any C++ object crosses
// the boundary: an ABI version and a build fingerprint (ballast version,
// compiler, C++ standard library ABI). Only when both match does the
// registry call `create`, and from then on C++ objects (std::string,
// std::unique_ptr, Result) may cross because both sides were built alike.
// Plugin code must never let an exception escape: every entry point
// returns errors as values.
#pragma once

#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/version.hpp>

#include <memory>
#include <vector>

#define BALLAST_PLUGIN_ABI_VERSION 4u

namespace ballast {

// What a plugin implements.
class BackendPlugin {
 public:
  virtual ~BackendPlugin() = default;
  // Devices this plugin can open; `unavailable` with the reason when there
  // is no driver or no device.
  virtual Result<std::vector<DeviceInfo>> devices() = 0;
  // Opens the device chosen by `config` (index, uuid, options). Unknown
  // option keys are invalid_argument errors naming the known keys.
  virtual Result<std::unique_ptr<GpuBackend>> open(const BackendConfig& config) = 0;
};

// The build fingerprint of the core library (see plugin_detail::kFingerprint).
const char* build_fingerprint() noexcept;

}  // namespace ballast

extern "C" {

struct BallastPluginDescriptor {
  unsigned abi_version;     // BALLAST_PLUGIN_ABI_VERSION
  const char* fingerprint;  // ballast::build_fingerprint() as the plugin saw it
  const char* name;         // "cuda", "hip", "vulkan"
  // Called once; the registry keeps the plugin (and the library) for the
  // life of the process.
  ballast::BackendPlugin* (*create)();
};

}  // extern "C"

namespace ballast::plugin_detail {
#define BALLAST_PLUGIN_STR2_(x) #x
#define BALLAST_PLUGIN_STR_(x) BALLAST_PLUGIN_STR2_(x)
#if defined(__clang__)
#define BALLAST_PLUGIN_COMPILER_ "clang-" BALLAST_PLUGIN_STR_(__clang_major__)
#elif defined(__GNUC__)
#define BALLAST_PLUGIN_COMPILER_ "gcc-" BALLAST_PLUGIN_STR_(__GNUC__)
#elif defined(_MSC_VER)
#define BALLAST_PLUGIN_COMPILER_ "msvc-" BALLAST_PLUGIN_STR_(_MSC_VER)
#else
#define BALLAST_PLUGIN_COMPILER_ "unknown-compiler"
#endif
#if defined(_LIBCPP_VERSION)
#define BALLAST_PLUGIN_STDLIB_ "libc++-" BALLAST_PLUGIN_STR_(_LIBCPP_VERSION)
#elif defined(__GLIBCXX__)
#define BALLAST_PLUGIN_STDLIB_ "libstdc++-cxx11abi" BALLAST_PLUGIN_STR_(_GLIBCXX_USE_CXX11_ABI)
#else
#define BALLAST_PLUGIN_STDLIB_ "msvc-stl"
#endif
// Expanded in the translation unit that includes this header, so the core
// and each plugin record how *they* were compiled.
inline constexpr const char* kFingerprint =
    "ballast-" BALLAST_VERSION_STRING ";abi-" BALLAST_PLUGIN_STR_(BALLAST_PLUGIN_ABI_VERSION) ";" BALLAST_PLUGIN_COMPILER_ ";" BALLAST_PLUGIN_STDLIB_ ";c++" BALLAST_PLUGIN_STR_(__cplusplus);
}  // namespace ballast::plugin_detail
