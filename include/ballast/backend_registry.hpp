// Choosing a backend by string. Grammar:
//   name[:device][?key=value(&key=value)*]
// name: cpu | cuda | hip | vulkan, or any other backend registered or
// found as a plugin file (a lowercase identifier); device: an index or GPU-<uuid>.
// Examples: "cpu", "cuda:0", "vulkan:GPU-1f2e...?validation=on".
#pragma once

#include <ballast/export.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

struct BackendConfig {
  std::string name;
  std::optional<int> device_index;   // ":1"
  std::optional<std::string> device_uuid;  // ":GPU-..."
  std::map<std::string, std::string, std::less<>> options;  // "?k=v&k2=v2"
  std::string text;  // the string it was parsed from
};

// Pure parsing; unknown backend names are accepted here and refused by
// open_backend. At most 1024 bytes; errors quote the string's first 80.
Result<BackendConfig> parse_backend_config(std::string_view text);

// Names open_backend knows, each once, in this order: the first-party
// backends cpu, cuda, hip, vulkan (always, found or not), then the names
// given to register_backend() (sorted), then the <name> of every
// libballast-<name>.so in the plugin search folders (sorted). Looks at the
// folders on every call.
std::vector<std::string> known_backend_names();

// Opens a backend. The CPU backend is built in (registered with
// register_backend, include/ballast/plugin_abi.hpp); the others are plugins
// loaded on first use. Failure is specific and never falls back:
//   invalid_argument  a config string that does not parse, an unknown name
//                     (lists the known ones), an option the backend refuses
//   not_found         the plugin file (lists the paths searched), or the
//                     device asked for (lists the devices there)
//   io                a plugin file that does not load (dlopen's reason)
//   abi_mismatch      a plugin of another ABI, or whose tables break it
//                     (naming the file)
//   unavailable       the plugin's reason: no driver, no device
//   and the plugin's own codes from opening the device (out_of_memory,
//   device_error, unsupported, ...).
Result<std::unique_ptr<GpuBackend>> open_backend(std::string_view config);

// A plugin-wide extension by name: the get_proc_address of the plugin that
// serves `backend` (plugin ABI 1.1; BackendPlugin::extension in the SDK),
// found or loaded as open_backend() would, opening no device. Null when the
// plugin has none of that name (a 1.0 plugin has none at all). Errors are
// open_backend()'s for finding the plugin (invalid_argument for an unknown
// backend or a null `name`, not_found, io, abi_mismatch). What the pointer
// is, is the extension's own contract; plugins are never unloaded, so it
// stays valid. A device's own extensions: GpuBackend::extension().
Result<void*> plugin_extension(std::string_view backend, const char* name);

struct BackendListing {
  // found: a plugin file is there and admissible, but was not loaded for
  //   this listing (nothing of it has run; ask for it in ListOptions);
  // refused: files of its name are there, none admissible (`refused` says
  //   why each one was not loaded: owner, permissions, a symlink, a FIFO).
  enum class State { available, unavailable, not_found, load_error, found, refused };
  std::string name;
  State state = State::not_found;
  std::string reason;                  // for anything but available and found
  std::string library;                 // plugin path when found ("built in" when registered, as cpu is)
  std::vector<std::string> searched;   // paths tried when not found or refused
  std::vector<std::string> refused;    // "<path>: <why>" for each file passed over, in search order
  std::vector<DeviceInfo> devices;
  Capabilities capabilities;           // of device 0, when available
};
std::string_view backend_state_name(BackendListing::State s) noexcept;

// Which plugin files a listing may load. Loading a plugin runs its code
// (constructors, driver start-up), so by default a listing loads none: a
// plugin not loaded before is `found`, with its path. Registered backends
// and plugins already loaded in this process are always listed in full.
struct ListOptions {
  bool load_all = false;           // every admissible plugin found (`ballast backends --load`)
  std::vector<std::string> load;   // or only these names
};

// One listing per known_backend_names() entry, in that order, loading
// nothing that is not loaded already.
std::vector<BackendListing> list_backends();
std::vector<BackendListing> list_backends(const ListOptions& options);

// Where plugin libraries (libballast-<name>.so) are looked for, in order:
//   1. each folder of BALLAST_PLUGIN_PATH (':'-separated);
//   2. the folders given to set_plugin_search_path();
//   3. <folder holding libballast>/ballast: an install's plugin folder,
//      wherever the install lives or was moved to;
//   4. the build tree's lib/, when libballast is the build tree's own.
// Each folder is made absolute when it is set. A file is loaded only when it
// is a regular file (never a symlink), owned by root or the running user,
// writable by no one else, in a folder of the same kind; other files are
// passed over and named in the error. The first admissible file is the
// plugin (docs/plugins.md). A name given to register_backend() is never
// looked up as a file.
//
// set_plugin_search_path() replaces the folders of step 2 (an engine that
// ships its own plugins; an empty list removes them). Plugins already
// loaded stay loaded; a backend whose plugin was not found, or failed to
// load, is looked for again on its next open. Thread-safe.
void set_plugin_search_path(std::vector<std::string> folders);
// The folders searched now, in order: what a not-found error lists.
std::vector<std::string> plugin_search_paths();

}  // namespace ballast

BALLAST_API_END
