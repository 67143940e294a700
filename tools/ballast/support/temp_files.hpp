// Temporary files the CLI writes before renaming them into place (compact's
// outputs, derive --dump's .npy files, inspect --map's SVG), and the atomic
// replacement of one small file.
//
// A registered temporary is removed if SIGINT, SIGTERM, SIGHUP, SIGQUIT or SIGPIPE
// ends the process while it is registered: the handler unlinks every
// registered name, then the signal is raised again with its default action,
// so the exit status still says which signal it was. A signal whose
// disposition is not the default when the first temporary is registered
// (SIG_IGN under nohup, an engine's own handler) is left alone. SIGXFSZ
// (RLIMIT_FSIZE, `ulimit -f`) gets a handler that does nothing, so a write
// past the limit is an EFBIG error the command reports and cleans up after,
// not a core dump that leaves the temporary behind. SIGKILL cannot be
// caught: what it leaves is a hidden name carrying the writer's pid.
#pragma once

#include <ballast/status.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace ballast::cli {

// While alive, `name` beneath `dir_fd` (AT_FDCWD: `name` is a path as
// given) is unlinked if one of the signals above ends the process. The
// order that leaves nothing behind: construct the guard on a name unique
// to this process (temp_name_for), create the file (O_EXCL), then call
// created(). The handler may run on another thread than the creator's,
// between the two: created() then removes the file itself. The descriptor
// must stay open while registered.
class TempFileGuard {
 public:
  TempFileGuard() = default;
  TempFileGuard(int dir_fd, std::string_view name);
  TempFileGuard(TempFileGuard&& other) noexcept;
  TempFileGuard& operator=(TempFileGuard&& other) noexcept;
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  ~TempFileGuard();

  // The file now exists: removed here at once if a signal is already
  // ending the process (its handler ran before the file was there).
  void created() noexcept;

  // No longer removed on a signal (renamed into place, or unlinked).
  void release() noexcept;

 private:
  void* slot_ = nullptr;  // the registry's slot (temp_files.cpp)
};

// A hidden name for a temporary beside `final_name` in the same directory,
// unique to this process and call, never longer than NAME_MAX.
std::string temp_name_for(std::string_view final_name);

// Writes `bytes` to `path` whole or not at all: into a temporary beside it,
// flushed, then renamed over it, so a failure (a full disk, a file size
// limit, a signal) leaves the earlier file as it was and no half file. A
// `path` that is a symlink is followed: the file it names is replaced. A
// `path` naming something other than a regular file (a FIFO,
// /dev/stdout) is written directly, as it cannot be replaced.
Status write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

}  // namespace ballast::cli
