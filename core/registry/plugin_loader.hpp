// Finds, loads and checks backend plugin libraries, once per name.
// The process uses one loader over the documented search path; tests make
// their own over folders of deliberately broken plugins.
#pragma once

#include "backend/plugin_tables.hpp"
#include "registry/plugin_file.hpp"

#include <ballast/plugin_abi.hpp>
#include <ballast/status.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <ballast/export.hpp>

// Exported from libballast for the registry's own tests only (loaders over
// test folders); not installed, not public API.
BALLAST_API_BEGIN

namespace ballast::registry {

struct LoadedPlugin {
  const detail::PluginTable* plugin = nullptr;  // owned by the loader
  std::string library;              // path it came from
};

// What one search folder holds under a plugin's file name, checked but not
// loaded (check_plugin_candidate without the descriptor).
struct CandidateReport {
  std::string path;
  PluginCandidate::Verdict verdict = PluginCandidate::Verdict::absent;
  std::string reason;  // why refused
};

// "<path>: <reason>" for each refused report, in search order.
std::vector<std::string> refusal_lines(const std::vector<CandidateReport>& reports);

// The symbol every plugin exports (plugin_api.h).
inline constexpr const char* kEntrySymbol = BALLAST_PLUGIN_ENTRY_SYMBOL;
// What plugins of the C++ plugin ABI (before plugin_api.h) exported:
// recognised only to say that such a file needs rebuilding.
inline constexpr const char* kOldDescriptorSymbol = "ballast_plugin_descriptor";

// The search path, in order: each folder of BALLAST_PLUGIN_PATH, then
// `engine_dirs` (set_plugin_search_path), then <folder of libballast>/ballast
// (where an install puts plugins, wherever the install was moved), then the
// build tree's lib/ when libballast is the build tree's own copy. Duplicates
// dropped, order kept. Every folder is made absolute here, against the
// working directory of this call, and one that cannot be (no working
// directory) is dropped: a search path never changes meaning when the
// process later changes directory. No absolute install path is baked in: a moved or
// re-prefixed install must find its own plugins, not a stale copy.
std::vector<std::string> default_plugin_search_dirs(const std::vector<std::string>& engine_dirs = {});

class PluginLoader {
 public:
  explicit PluginLoader(std::vector<std::string> search_dirs);
  PluginLoader(const PluginLoader&) = delete;
  PluginLoader& operator=(const PluginLoader&) = delete;
  ~PluginLoader();

  // The plugin for `name` (cuda, hip, vulkan, or any third-party name).
  // The first call finds, loads, checks and creates it; every later call,
  // from any thread, returns that same outcome, except that a failed load is
  // tried again once the search folders have changed (a loaded plugin is
  // never unloaded, so success is final). A claimed name is never loaded.
  // The first admitted file in search order is the plugin: refused files
  // (plugin_file.hpp) are skipped and named in the not_found error, while an
  // admitted file that fails to load or to pass the ABI check (its table's
  // major version, size and name: PluginTable::check) is the outcome,
  // never skipped for another copy further down. A call for `name` made
  // by the plugin itself while this thread loads it (a static constructor,
  // the entry point) is refused as unsupported: waiting would hang.
  Result<LoadedPlugin> load(std::string_view name);

  // Keeps `name` from ever being loaded from a file (register_backend has
  // it). Waits for a load of it in progress; refused (unsupported) when
  // its plugin file is already loaded.
  Status claim(std::string_view name);

  // The backend names of the plugin files in the search folders
  // (libballast-<name>.so with <name> a lowercase identifier), sorted, each
  // once: every entry of such a name but a directory, admissible or not
  // (probe says which), never opened. Folders that do not exist or cannot
  // be read are skipped.
  std::vector<std::string> discover() const;

  // Each search folder's candidate for `name`, in order, checked and not
  // loaded; absent ones included.
  std::vector<CandidateReport> probe(std::string_view name) const;

  // The plugin `name` was loaded as, when an earlier load() succeeded;
  // never loads (nothing while this thread is loading it).
  std::optional<LoadedPlugin> loaded(std::string_view name);

  // Full paths tried for `name`, in search order.
  std::vector<std::string> candidate_paths(std::string_view name) const;
  std::vector<std::string> search_dirs() const;
  // Replaces the search folders (normalised like the constructor's).
  void set_search_dirs(std::vector<std::string> search_dirs);

 private:
  struct Slot;
  Result<LoadedPlugin> load_uncached(std::string_view name, const std::vector<std::string>& dirs) const;
  Slot& slot(std::string_view name);

  mutable std::mutex dirs_mutex_;
  std::vector<std::string> dirs_;
  std::uint64_t generation_ = 0;  // bumped by set_search_dirs
  std::mutex slots_mutex_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

// The loader open_backend and list_backends use, made (reading
// BALLAST_PLUGIN_PATH) on first use.
PluginLoader& process_plugin_loader();
// That loader if it has been made, else null; never makes it (for
// register_backend, which may run during static initialisation).
PluginLoader* process_plugin_loader_if_made() noexcept;

}  // namespace ballast::registry

BALLAST_API_END
