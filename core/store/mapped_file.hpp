// A read-only memory mapping of one whole file. Weight bytes are borrowed
// from these mappings, so a MappedFile is held by shared_ptr and outlives
// every span handed out from it.
//
// It also records the file's size, device + inode and modification time at
// that moment, so that ballast's own reads can tell that the file changed
// under the mapping (a truncated file turns a read through the mapping into
// SIGBUS), and copies out of it under a SIGBUS guard (store/sigbus_guard).
// No descriptor is kept: a model saved one file per tensor maps thousands
// of files. docs/reliability.md has the story.
#pragma once

#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include "store/safe_open.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>

namespace ballast::store {

// What a file looked like: what check_unchanged compares.
struct FileStamp {
  std::uint64_t size = 0;
  FileIdentity identity;
  std::int64_t mtime_sec = 0;
  std::int64_t mtime_nsec = 0;
  // The status change time: set by the kernel on every write, truncation,
  // chmod or utimensat, and unlike the modification time no user can set
  // it back, so a file rewritten and then dated back (cp -p, rsync -t, an
  // attacker's touch -d) is still seen to have changed.
  std::int64_t ctime_sec = 0;
  std::int64_t ctime_nsec = 0;
};
FileStamp stamp_of(const struct stat& st) noexcept;
// Whether `now` differs from `opened` in its status-change time alone
// (size and modification time equal): what unlinking a file, or renaming
// another over its path, does to the inode, its bytes untouched. Either
// field of that time alone is a change: on a file system whose times are
// whole seconds, the nanoseconds never differ.
bool only_status_changed(const FileStamp& opened, const FileStamp& now) noexcept;

class MappedFile {
 public:
  // Maps `path` read-only (symlinks followed: the caller chose the path).
  // The type is checked on an O_PATH descriptor first, so a FIFO or a
  // device is never opened; the mapping is made from the descriptor that
  // was checked.
  static Result<std::shared_ptr<const MappedFile>> open(const std::filesystem::path& path);
  // Maps the regular file open on `fd` (`st` is its fstat). `path` is for
  // display and for check_unchanged(), which stats it; nothing is opened by
  // name. `fd` stays the caller's; it may be closed once this returns.
  static Result<std::shared_ptr<const MappedFile>> map(int fd, const struct stat& st, std::filesystem::path path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return stamp_.size; }
  FileIdentity identity() const noexcept { return stamp_.identity; }
  const FileStamp& stamp() const noexcept { return stamp_; }
  // Empty for a zero-length file (nothing is mapped then).
  Bytes bytes() const noexcept { return {data_, static_cast<std::size_t>(stamp_.size)}; }
  // ok while the file has the size, modification time and status change
  // time it had when it was mapped and no read of the mapping has faulted;
  // otherwise an io error worded
  //   "<file> changed since it was opened (size X, now Y)"
  // (or "(modified <time>, now <time>)", "(status changed <time>, now
  // <time>)", or, once poisoned, "... a read of its mapping faulted ...").
  // Poison is for good: a page the guard zero-filled reads zeros for the
  // mapping's lifetime, whatever the file holds again. One stat(2) of path(): while the
  // path names the mapped inode, that is the mapped file. When it names
  // another inode or nothing (a file renamed over it, or deleted), the
  // mapped inode is no longer reachable by name and is left as it was
  // (nothing can truncate it then but a descriptor opened before), so this
  // is ok and the mapping keeps serving the bytes it has.
  Status check_unchanged() const;
  // The same check of the file open on `fd` (one fstat(2)), which must be
  // the mapped inode: for a reader holding its own descriptor, whose file
  // may no longer be the one the path names. A descriptor of another inode
  // is an io error. A change of status time alone is accepted once the
  // path no longer names the inode (unlinked, or another file renamed
  // over it: that changes the inode's status, not its bytes).
  Status check_descriptor(int fd) const;
  // Copies bytes [offset, offset + dst.size()) of the mapping into `dst`
  // under the SIGBUS guard, checking the file before and after (a rewrite
  // during the copy is an error too): a truncation before or during the
  // copy is an io error, never a signal. A range outside the file as mapped
  // is out_of_bounds.
  Status read(std::uint64_t offset, std::span<std::byte> dst) const;
  // Hands bytes [offset, offset + length) of the mapping itself to `sink`,
  // with the range armed for zero-filling (ZeroFillRange in
  // store/sigbus_guard.hpp) while it runs: a truncation before the call is
  // the io error of check_unchanged(); one while `sink` reads makes the
  // lost pages read as zeros (no signal) and is the same io error after
  // it returns. Otherwise `sink`'s error, or, when it succeeded, a rewrite
  // during it (checked after). unavailable when every slot for armed
  // ranges is busy and this thread holds one (a transfer nested in a
  // sink); a range outside the file as mapped is out_of_bounds.
  Status transfer(std::uint64_t offset, std::uint64_t length, const std::function<Status(Bytes)>& sink) const;
  // Whether a guarded read of the mapping faulted (its zero-filled pages no
  // longer show the file): every check and read refuses it from then on.
  bool poisoned() const noexcept { return poisoned_.load(std::memory_order_acquire); }
  // The flag the guard sets (store/sigbus_guard.hpp); lives as long as this.
  std::atomic<bool>* poison_flag() const noexcept { return &poisoned_; }

 private:
  MappedFile() = default;
  // check_unchanged() without the poison: what stat(2) says.
  Status check_stamp() const;
  // The io error for the mapped inode now stamped `now`, or ok.
  Status compare_stamp(const FileStamp& now) const;
  // out_of_bounds unless [offset, offset + length) lies inside the file as mapped.
  Status check_range(const char* verb, std::uint64_t offset, std::uint64_t length) const;
  // The io error for pages of [offset, offset + length) that vanished under a read.
  Status pages_gone(std::uint64_t offset, std::uint64_t length) const;

  std::filesystem::path path_;
  FileStamp stamp_;
  const std::byte* data_ = nullptr;
  mutable std::atomic<bool> poisoned_{false};
};

// Tests: called by MappedFile::read between the check before the copy and
// the copy (to change the file at exactly that point). Not
// thread-safe to set while reads run; empty to clear.
void set_read_hook_for_testing(std::function<void(const MappedFile&)> hook);

}  // namespace ballast::store
