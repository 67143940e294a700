// The built-in CPU backend, exposed to the registry as a BackendPlugin like
// any other so the registry treats every backend the same way.
#pragma once

#include <ballast/plugin_abi.hpp>

namespace ballast::cpu {

// The process-wide CPU plugin (never null, never unloaded).
BackendPlugin& plugin();

}  // namespace ballast::cpu
