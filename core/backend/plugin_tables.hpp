// The core's side of the plugin ABI (plugin_api.h): a plugin's C tables,
// checked and turned into what the rest of the core uses. PluginTable is a
// ballast_plugin whose version the core accepts; TableBackend (inside
// plugin_tables.cpp) is the GpuBackend over an opened ballast_backend, so
// the validated center (GpuBackend's public methods and LiveRanges) stays
// the one place of checks in front of every backend.
#pragma once

#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/plugin_api.h>
#include <ballast/status.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
#include <ballast/export.hpp>

// Exported from libballast for the registry's own tests only (they hold
// the PluginTable a loader returns); not installed, not public API.
BALLAST_API_BEGIN

namespace ballast::detail {

// "1.1"
std::string api_version_text(std::uint32_t major, std::uint32_t minor);

class PluginTable {
 public:
  // Reads the frozen prefix of `table`: abi_mismatch for a null table, one
  // smaller than that prefix, another major (both versions named), a size
  // below its major's first minor, a name other than `expected_name`
  // (when not empty), or a missing required function.
  static Result<std::unique_ptr<PluginTable>> check(const ballast_plugin* table, std::string_view expected_name);

  const std::string& name() const { return name_; }
  std::uint32_t api_minor() const { return table_.api_minor; }
  // A call made from inside the same call of this plugin on this thread
  // (its devices() listing the backends, its open() opening itself) is
  // refused as unsupported rather than recursing without end.
  Result<std::vector<DeviceInfo>> devices() const;
  Result<std::unique_ptr<GpuBackend>> open(const BackendConfig& config) const;
  // The plugin's get_proc_address (a 1.0 plugin has none: null).
  void* extension(const char* name) const;

 private:
  explicit PluginTable(const ballast_plugin& table);
  ballast_plugin table_{};  // a copy: fields past the plugin's struct_size stay zero (absent)
  std::string name_;
};

// The GpuBackend over an opened backend table, which it owns from here on
// (destroy() is called when it goes, even on error). abi_mismatch when the
// table is smaller than ABI 1.0's or lacks a required function.
Result<std::unique_ptr<GpuBackend>> adopt_backend_table(const ballast_backend* table);

}  // namespace ballast::detail

BALLAST_API_END
