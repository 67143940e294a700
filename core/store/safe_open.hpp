// Opening files beneath a directory handle without check-then-open races.
//
// A location is resolved and opened in one step relative to a directory
// that is held open: openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV) where the kernel has it, otherwise (and for the cases
// openat2 refuses but a second root or an in-tree absolute symlink admits)
// a walk of one component at a time with openat(O_NOFOLLOW), symlinks
// expanded in user space and the result checked by device + inode against
// the roots. Whatever is returned is an open descriptor and the fstat of
// that descriptor: nothing is ever re-opened by path.
#pragma once

#include <ballast/status.hpp>

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace ballast::store {

// An owned file descriptor (closed on destruction).
class Fd {
 public:
  Fd() noexcept = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd();
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// Which file an open descriptor is: st_dev + st_ino.
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
};
FileIdentity identity_of(const struct stat& st) noexcept;

// A directory held open (O_PATH | O_DIRECTORY) that locations start from or
// must stay beneath.
struct Root {
  Fd fd;
  FileIdentity id;
};

// Opens `dir` (symlinks in it followed: the caller chose it) as a root.
Result<Root> open_root(const std::filesystem::path& dir);
// The directory that holds `fd`'s file: looked up through the descriptor
// (/proc/self/fd), and accepted only when that directory really holds an
// entry with `fd`'s identity. nullopt when that cannot be established.
std::optional<Root> open_parent_of(int fd, const struct stat& st);

// An open regular file and the fstat of that very descriptor.
struct OpenedFile {
  Fd fd;  // O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY
  struct stat st {};
  std::size_t root = 0;  // index of the root it lies beneath
};

// Opens `location` (relative, checked lexically by the caller) beneath
// roots[0], following symlinks as long as the final file lies beneath one
// of `roots`, on that root's file system. Refuses without reading anything:
// path_escapes (outside every root, or across a mount), not_found, io (not
// a regular file: FIFO, device, socket, directory; too many symlinks; the
// OS refused). Messages never say where a symlink points.
Result<OpenedFile> open_beneath(std::span<const Root* const> roots, std::string_view location);

// Opens `path` (symlinks followed) as a regular file: the type is checked
// on an O_PATH descriptor before anything is opened for reading, so FIFOs
// and devices are never opened.
Result<OpenedFile> open_regular(const std::filesystem::path& path);

// The absolute path the kernel has for `fd`, for display and bookkeeping
// only (never opened again); `fallback` when it is not available.
std::filesystem::path path_of(int fd, const std::filesystem::path& fallback);

// Tests: behave as if openat2 were missing (ENOSYS), so that the
// per-component walk handles every location.
void force_component_walk_for_testing(bool on) noexcept;
// Tests: called with the probe's stat between the O_PATH probe of a file
// and its reopen for reading (null: nothing), so a test can make that file
// vanish or change there, as a racing writer would.
void set_before_reopen_for_testing(void (*hook)(const struct stat& probe)) noexcept;

// "a FIFO", "a directory", ... for a st_mode.
const char* file_kind_name(mode_t mode) noexcept;

}  // namespace ballast::store
