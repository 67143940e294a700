// The operating-system side of plugin loading, kept to these few calls so
// that a port touches one small file (shared_library_posix.cpp today).
#pragma once

#include <ballast/status.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace ballast::registry {

// An opened library. Never closed: plugin code and the objects it made
// must stay valid for the life of the process.
struct SharedLibrary {
  void* handle = nullptr;
  std::string path;
};

// Opened only through open_checked_library (plugin_file.hpp), which loads
// the descriptor it checked; there is no loading by path.

// The address of `symbol`, or a not_found error with the loader's message.
Result<void*> find_symbol(const SharedLibrary& library, const char* symbol);

// "libballast-cuda.so" on POSIX.
std::string plugin_file_name(std::string_view backend);
// The inverse: "cuda" for "libballast-cuda.so"; nothing for a file name of
// another shape (the name is not checked further).
std::optional<std::string> plugin_backend_name(std::string_view file_name);

// Separator of the entries of BALLAST_PLUGIN_PATH (':' on POSIX).
char plugin_path_separator() noexcept;

// Folder holding libballast itself; empty when the system cannot tell.
std::string core_library_directory();

}  // namespace ballast::registry
