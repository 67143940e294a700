// Finds, loads and checks backend plugin libraries, once per name.
// The process uses one loader over the documented search path; tests make
// their own over folders of deliberately broken plugins.
#pragma once

#include <ballast/plugin_abi.hpp>
#include <ballast/status.hpp>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ballast::registry {

struct LoadedPlugin {
  BackendPlugin* plugin = nullptr;  // owned by the loader, never destroyed
  std::string library;              // path it came from
};

// The symbol every plugin exports.
inline constexpr const char* kDescriptorSymbol = "ballast_plugin_descriptor";

// Each folder of BALLAST_PLUGIN_PATH, then the folder of libballast, then
// the install's plugin folder; duplicates dropped, order kept.
std::vector<std::string> default_plugin_search_dirs();

class PluginLoader {
 public:
  explicit PluginLoader(std::vector<std::string> search_dirs);
  PluginLoader(const PluginLoader&) = delete;
  PluginLoader& operator=(const PluginLoader&) = delete;
  ~PluginLoader();

  // The plugin for `name` (one of the plugin backends: cuda, hip, vulkan).
  // The first call finds, loads, checks and creates it; every later call,
  // from any thread, returns that same outcome.
  Result<LoadedPlugin> load(std::string_view name);

  // Full paths tried for `name`, in search order.
  std::vector<std::string> candidate_paths(std::string_view name) const;
  const std::vector<std::string>& search_dirs() const { return dirs_; }

 private:
  struct Slot;
  Result<LoadedPlugin> load_uncached(std::string_view name) const;
  Slot& slot(std::string_view name);

  std::vector<std::string> dirs_;
  std::mutex slots_mutex_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

// The loader open_backend and list_backends use.
PluginLoader& process_plugin_loader();

}  // namespace ballast::registry
