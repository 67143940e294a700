// open_backend and list_backends over a chosen plugin loader: the public
// functions use the process loader, tests use loaders over test folders.
#pragma once

#include "registry/plugin_loader.hpp"

#include <ballast/backend_registry.hpp>

namespace ballast::registry {

Result<std::unique_ptr<GpuBackend>> open_backend(PluginLoader& loader, std::string_view config);
std::vector<BackendListing> list_backends(PluginLoader& loader);
// known_backend_names() over `loader`'s search folders.
std::vector<std::string> known_backend_names(PluginLoader& loader);

}  // namespace ballast::registry
