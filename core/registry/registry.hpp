// open_backend and list_backends over a chosen plugin loader: the public
// functions use the process loader, tests use loaders over test folders.
#pragma once

#include "registry/plugin_loader.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/export.hpp>

// Exported from libballast for the registry's own tests only (loaders over
// test folders); not installed, not public API.
BALLAST_API_BEGIN

namespace ballast::registry {

Result<std::unique_ptr<GpuBackend>> open_backend(PluginLoader& loader, std::string_view config);
std::vector<BackendListing> list_backends(PluginLoader& loader, const ListOptions& options = {});
Result<void*> plugin_extension(PluginLoader& loader, std::string_view backend, const char* name);
// known_backend_names() over `loader`'s search folders.
std::vector<std::string> known_backend_names(PluginLoader& loader);

}  // namespace ballast::registry

BALLAST_API_END
