// The contract between the registry and a backend: the plugin SDK
// (installed as the CMake component ballast::plugin_sdk; docs/plugins.md).
// Backend authors and engines that bring their own backend include it;
// engines that only open backends never need it.
//
// A backend reaches the registry one of two ways:
//  - as a plugin library, libballast-<name>.so in a plugin search folder,
//    exporting one C symbol, `ballast_plugin_descriptor`, written by
//    BALLAST_PLUGIN_ENTRY below. The descriptor's plain-C fields are checked
//    BEFORE any C++ object crosses the boundary: an ABI version and a build
//    fingerprint (ballast version, compiler, C++ standard library ABI).
//    Only when both match does the registry call `create`, and from then on
//    C++ objects (std::string, std::unique_ptr, Result) may cross because
//    both sides were built alike;
//  - linked into the program (the built-in CPU backend, an engine's own
//    backend), handed over with register_backend().
// Backend code must never let an exception escape: every entry point
// returns errors as values.
#pragma once

#include <ballast/export.hpp>
#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/version.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

BALLAST_API_BEGIN

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

// Makes `plugin` the backend called `name` for open_backend, list_backends
// and `ballast backends`, for a backend linked into the program rather than
// loaded from a plugin file (the built-in CPU backend registers itself this
// way). A registered name is never looked up as a file. The registry keeps a
// reference to `plugin` for the life of the process: it must outlive every
// use (a function-local static or a leaked object; it is never destroyed by
// ballast). Thread-safe; may be called during static initialisation.
// Errors:
//   invalid_argument: `name` is not a lowercase identifier [a-z][a-z0-9_]*;
//   unsupported:      the name is taken, by a registered backend or by a
//                     plugin file of that name already loaded (a name has
//                     one backend per process).
Status register_backend(std::string name, BackendPlugin& plugin);

}  // namespace ballast

namespace ballast::plugin_detail {

// The backend-name rule: a lowercase identifier, [a-z][a-z0-9_]*.
constexpr bool is_backend_name(std::string_view name) noexcept {
  if (name.empty() || name.front() < 'a' || name.front() > 'z') return false;
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// BALLAST_PLUGIN_ENTRY's factory: a pointer to the plugin, or something
// callable with no arguments that returns one.
inline BackendPlugin* plugin_from(BackendPlugin* plugin) noexcept { return plugin; }
template <class Factory>
  requires std::is_invocable_r_v<BackendPlugin*, Factory&>
BackendPlugin* plugin_from(Factory&& factory) {
  return factory();
}

}  // namespace ballast::plugin_detail

extern "C" {

// Written by BALLAST_PLUGIN_ENTRY; never by hand.
struct BallastPluginDescriptor {
  unsigned abi_version;     // BALLAST_PLUGIN_ABI_VERSION
  const char* fingerprint;  // ballast::build_fingerprint() as the plugin saw it
  const char* name;         // "cuda", "hip", "vulkan": the <name> of libballast-<name>.so
  // Called once; the registry keeps the plugin (and the library) for the
  // life of the process.
  ballast::BackendPlugin* (*create)();
};

}  // extern "C"

#if defined(__GNUC__) || defined(__clang__)
#define BALLAST_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define BALLAST_PLUGIN_EXPORT
#endif

// The entry point of a plugin library, written once in one of its .cpp
// files (at namespace scope):
//
//   BALLAST_PLUGIN_ENTRY("mybackend", new my::Plugin())
//   BALLAST_PLUGIN_ENTRY("mybackend", &my::create_plugin)
//
// `name` is a string literal, the backend's name (a lowercase identifier,
// checked at compile time), which must match the library's file name
// libballast-<name>.so. `factory` is an expression giving a
// ballast::BackendPlugin* (evaluated once, when the registry first needs
// the plugin), or a function/lambda returning one. An exception from it is
// caught and reported as a failed create(); null is reported likewise.
// Expands to the exported `extern "C"` ballast_plugin_descriptor() with this
// header's ABI version and build fingerprint. (The factory is the rest of
// the arguments, so a comma inside it, as in new my::Plugin<A, B>(), needs
// no extra parentheses.)
#define BALLAST_PLUGIN_ENTRY(name, ...)                                                                              \
  static_assert(::ballast::plugin_detail::is_backend_name(name),                                                   \
                "BALLAST_PLUGIN_ENTRY: the backend name must be a lowercase identifier [a-z][a-z0-9_]*");          \
  extern "C" BALLAST_PLUGIN_EXPORT const ::BallastPluginDescriptor* ballast_plugin_descriptor() {                   \
    static const ::BallastPluginDescriptor ballast_plugin_descriptor_{                                              \
        BALLAST_PLUGIN_ABI_VERSION, ::ballast::plugin_detail::kFingerprint, name,                                   \
        []() noexcept -> ::ballast::BackendPlugin* {                                                                \
          try {                                                                                                     \
            return ::ballast::plugin_detail::plugin_from(__VA_ARGS__);                                              \
          } catch (...) {                                                                                           \
            return nullptr;                                                                                         \
          }                                                                                                         \
        }};                                                                                                         \
    return &ballast_plugin_descriptor_;                                                                             \
  }                                                                                                                 \
  static_assert(true, "")

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

BALLAST_API_END
