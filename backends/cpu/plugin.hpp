// The CPU backend's plugin: the registry sees it through the same C tables
// as any other backend's (plugin.cpp).
#pragma once

#include <ballast/plugin_abi.hpp>

namespace ballast::cpu {

// The process-wide CPU plugin (never null, never unloaded).
BackendPlugin& plugin();

}  // namespace ballast::cpu
