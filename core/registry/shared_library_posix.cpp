#include "registry/shared_library.hpp"

#include <dlfcn.h>

#include <string>

namespace ballast::registry {

Result<void*> find_symbol(const SharedLibrary& library, const char* symbol) {
  ::dlerror();  // clear, so a stale message is never reported
  void* address = ::dlsym(library.handle, symbol);
  if (address == nullptr) {
    const char* why = ::dlerror();
    Error e = make_error(ErrorCode::not_found, std::string("symbol ") + symbol + " not exported" +
                                                   (why != nullptr ? std::string(": ") + why : std::string()));
    e.file = library.path;
    return e;
  }
  return address;
}

namespace {
constexpr std::string_view kPluginPrefix = "libballast-";
constexpr std::string_view kPluginSuffix = ".so";
}  // namespace

std::string plugin_file_name(std::string_view backend) {
  return std::string(kPluginPrefix) + std::string(backend) + std::string(kPluginSuffix);
}

std::optional<std::string> plugin_backend_name(std::string_view file_name) {
  if (file_name.size() <= kPluginPrefix.size() + kPluginSuffix.size()) return std::nullopt;
  if (file_name.substr(0, kPluginPrefix.size()) != kPluginPrefix) return std::nullopt;
  if (file_name.substr(file_name.size() - kPluginSuffix.size()) != kPluginSuffix) return std::nullopt;
  return std::string(file_name.substr(kPluginPrefix.size(), file_name.size() - kPluginPrefix.size() - kPluginSuffix.size()));
}

char plugin_path_separator() noexcept { return ':'; }

std::string core_library_directory() {
  Dl_info info{};
  // Any function defined in libballast identifies the library it lives in.
  if (::dladdr(reinterpret_cast<const void*>(&core_library_directory), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::string path = info.dli_fname;
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return {};
  return path.substr(0, slash == 0 ? 1 : slash);
}

}  // namespace ballast::registry
