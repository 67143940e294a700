// Where the fake plugins (fake_plugin.c, one build per kind of misbehaviour)
// are built: FAKE_PLUGIN_ROOT/<kind>/libballast-<name>.so.
#pragma once

#include <string>

namespace ballast::testing {

inline const std::string kFakes = FAKE_PLUGIN_ROOT;

inline std::string fake_dir(const std::string& kind) { return kFakes + "/" + kind; }

inline std::string fake_library(const std::string& kind, const std::string& name = "vulkan") {
  return fake_dir(kind) + "/libballast-" + name + ".so";
}

}  // namespace ballast::testing
