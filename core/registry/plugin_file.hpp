// Deciding whether a file in a plugin folder may be loaded, before anything
// runs from it. A plugin's constructors run with the engine's privileges, so
// the file must be one that only root or the running user could have put
// there (the rule ssh applies to its keys), and what is loaded must be the
// very file that was checked: it is opened once, checked through that
// descriptor, and the loader is handed the descriptor (/proc/self/fd/N),
// never the name again. docs/plugins.md, "Which files are loaded".
#pragma once

#include "registry/shared_library.hpp"

#include <ballast/export.hpp>
#include <ballast/status.hpp>

#include <string>

// Exported from libballast for the registry's own tests only; not installed.
BALLAST_API_BEGIN

namespace ballast::registry {

// An open descriptor, closed on destruction unless released.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
  int get() const noexcept { return fd_; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// One file name in one search folder, looked at without loading it.
struct PluginCandidate {
  enum class Verdict {
    absent,    // no entry of that name (or no such folder): not reported
    refused,   // there, but not admissible; `reason` says why
    admitted,  // passed every check; `file` is its open descriptor
  };
  Verdict verdict = Verdict::absent;
  std::string path;    // <folder>/<file name>, as searched
  std::string reason;  // for refused: "writable by group (mode 0775)", ...
  FileDescriptor file;
};

// Opens and checks `<folder>/<file_name>`:
//  - the entry is opened with O_RDONLY | O_NOFOLLOW | O_NONBLOCK: a symlink
//    is refused, a FIFO opens at once instead of waiting for a writer;
//  - through that descriptor: a regular file, owned by root or the
//    effective user, not writable by group or others;
//  - its folder (the descriptor the file was opened beneath): owned by root
//    or the effective user, not writable by group or others, sticky or not.
// Never loads the file and never fails: a problem is a `refused` verdict.
PluginCandidate check_plugin_candidate(const std::string& folder, const std::string& file_name);

// Loads an admitted candidate through its descriptor. On success the
// descriptor is kept open for the life of the process: the dynamic loader
// remembers the library by the name /proc/self/fd/N and would hand the same
// library back for a later file that reused the number.
Result<SharedLibrary> open_checked_library(PluginCandidate&& admitted);

}  // namespace ballast::registry

BALLAST_API_END
