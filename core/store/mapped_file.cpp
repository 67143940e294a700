#include "store/mapped_file.hpp"

#include "store/sigbus_guard.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>

// Mappings are made with mmap(2) on the descriptor that was opened and
// checked, not with Boost.Interprocess: its file_mapping takes a path and
// opens it again, which is exactly the check-then-open race the loader
// must not have.
namespace ballast::store {

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), static_cast<std::size_t>(stamp_.size));
}

FileStamp stamp_of(const struct stat& st) noexcept {
  FileStamp s;
  s.size = st.st_size < 0 ? 0 : static_cast<std::uint64_t>(st.st_size);
  s.identity = identity_of(st);
  s.mtime_sec = static_cast<std::int64_t>(st.st_mtim.tv_sec);
  s.mtime_nsec = static_cast<std::int64_t>(st.st_mtim.tv_nsec);
  s.ctime_sec = static_cast<std::int64_t>(st.st_ctim.tv_sec);
  s.ctime_nsec = static_cast<std::int64_t>(st.st_ctim.tv_nsec);
  return s;
}

bool only_status_changed(const FileStamp& opened, const FileStamp& now) noexcept {
  return now.size == opened.size && now.mtime_sec == opened.mtime_sec && now.mtime_nsec == opened.mtime_nsec &&
         (now.ctime_sec != opened.ctime_sec || now.ctime_nsec != opened.ctime_nsec);
}

namespace {

std::function<void(const MappedFile&)> g_read_hook;

Error path_error(ErrorCode code, std::string message, const std::filesystem::path& path) {
  Error e = make_error(code, std::move(message));
  e.file = path.string();
  return e;
}

// "2024-05-01T12:00:00.123456789Z"
std::string utc_time(std::int64_t sec, std::int64_t nsec) {
  const auto t = static_cast<std::time_t>(sec);
  struct tm parts {};
  if (::gmtime_r(&t, &parts) == nullptr) return std::to_string(sec) + "." + std::to_string(nsec) + " s";
  char date[40];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &parts);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%09lldZ", static_cast<long long>(nsec));
  return std::string(date) + frac;
}

}  // namespace

void set_read_hook_for_testing(std::function<void(const MappedFile&)> hook) { g_read_hook = std::move(hook); }

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::filesystem::path& path) {
  auto opened = open_regular(path);
  if (!opened) {
    Error e = std::move(opened.error());
    e.file = path.string();
    return e;
  }
  return map(opened->fd.get(), opened->st, path_of(opened->fd.get(), path));
}

Result<std::shared_ptr<const MappedFile>> MappedFile::map(int fd, const struct stat& st, std::filesystem::path path) {
  if (!S_ISREG(st.st_mode))
    return path_error(ErrorCode::io,
                      std::string("refusing to map ") + file_kind_name(st.st_mode) + " (only regular files hold weights)",
                      path);
  if (st.st_size < 0) return path_error(ErrorCode::io, "negative file size", path);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > std::numeric_limits<std::size_t>::max() / 2)
    return path_error(ErrorCode::overflow, "file larger than the address space", path);

  std::shared_ptr<MappedFile> mapped(new MappedFile());
  mapped->path_ = std::move(path);
  mapped->stamp_ = stamp_of(st);
  if (size == 0) return std::shared_ptr<const MappedFile>(std::move(mapped));  // nothing to map
  void* p = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (err == ENOMEM)
      return path_error(ErrorCode::out_of_memory,
                        "cannot map another file: the process is out of address space or at the kernel's limit on "
                        "memory mappings (vm.max_map_count)",
                        mapped->path_);
    return path_error(ErrorCode::io, std::string("cannot memory-map: ") + std::strerror(err), mapped->path_);
  }
  mapped->data_ = static_cast<const std::byte*>(p);
  return std::shared_ptr<const MappedFile>(std::move(mapped));
}

Status MappedFile::check_unchanged() const {
  // What stat(2) says first (it names the change); then the poison, for a
  // file put back so well that stat cannot tell (a new inode renamed over
  // the path, as rsync -t does, while the faulted mapping holds the old one).
  if (Status s = check_stamp(); !s.ok()) return s;
  if (poisoned())
    return path_error(ErrorCode::io,
                      path_.string() +
                          " changed since it was opened (a read of its mapping faulted: the file was truncated "
                          "under it, and the pages lost read as zeros in this mapping for good; reopen the model)",
                      path_);
  return {};
}

Status MappedFile::check_stamp() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return {};  // deleted or renamed away: the mapped inode lives on, unchanged
    return path_error(ErrorCode::io, path_.string() + " cannot be checked for changes: " + std::strerror(err), path_);
  }
  const FileStamp now = stamp_of(st);
  // Another inode at the path: a file renamed over it. The mapping holds
  // the old one, which nothing reaches by name any more.
  if (now.identity != stamp_.identity) return {};
  return compare_stamp(now);
}

Status MappedFile::check_descriptor(int fd) const {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return path_error(ErrorCode::io, path_.string() + " cannot be checked for changes: " + std::strerror(errno), path_);
  const FileStamp now = stamp_of(st);
  if (now.identity != stamp_.identity)
    return path_error(ErrorCode::io,
                      path_.string() + ": the descriptor read is not the mapped file (inode " +
                          std::to_string(stamp_.identity.inode) + ", read " + std::to_string(now.identity.inode) + ")",
                      path_);
  if (only_status_changed(stamp_, now)) {
    // Only the status changed: unlinking the file, or renaming another over
    // its path (the safe re-export), does that to the mapped inode itself,
    // bytes untouched. Refused while the path still names this inode (a
    // truncation put back, re-dated), as check_unchanged() refuses it.
    struct stat at_path {};
    const bool gone =
        st.st_nlink == 0 || ::stat(path_.c_str(), &at_path) != 0 || !(identity_of(at_path) == stamp_.identity);
    if (!gone) return compare_stamp(now);
  } else if (Status s = compare_stamp(now); !s.ok()) {
    return s;
  }
  if (poisoned())
    return path_error(ErrorCode::io,
                      path_.string() +
                          " changed since it was opened (a read of its mapping faulted: the file was "
                          "truncated under it)",
                      path_);
  return {};
}

Status MappedFile::compare_stamp(const FileStamp& now) const {
  const std::string changed = path_.string() + " changed since it was opened ";
  if (now.size != stamp_.size)
    return path_error(ErrorCode::io,
                      changed + "(size " + std::to_string(stamp_.size) + ", now " + std::to_string(now.size) + ")",
                      path_);
  if (now.mtime_sec != stamp_.mtime_sec || now.mtime_nsec != stamp_.mtime_nsec)
    return path_error(ErrorCode::io,
                      changed + "(modified " + utc_time(stamp_.mtime_sec, stamp_.mtime_nsec) + ", now " +
                          utc_time(now.mtime_sec, now.mtime_nsec) + ")",
                      path_);
  if (now.ctime_sec != stamp_.ctime_sec || now.ctime_nsec != stamp_.ctime_nsec)
    return path_error(ErrorCode::io,
                      changed + "(status changed " + utc_time(stamp_.ctime_sec, stamp_.ctime_nsec) + ", now " +
                          utc_time(now.ctime_sec, now.ctime_nsec) +
                          ": written, truncated or re-dated since, though size and modification time match)",
                      path_);
  return {};
}

Status MappedFile::check_range(const char* verb, std::uint64_t offset, std::uint64_t length) const {
  if (offset <= stamp_.size && length <= stamp_.size - offset) return {};
  Error e = path_error(ErrorCode::out_of_bounds,
                       std::string(verb) + " [" + std::to_string(offset) + ", +" + std::to_string(length) + ") of a " +
                           std::to_string(stamp_.size) + "-byte file",
                       path_);
  e.offset = offset;
  return e;
}

Status MappedFile::pages_gone(std::uint64_t offset, std::uint64_t length) const {
  // The file shrank; the stat says how, unless it grew back meanwhile.
  if (Status s = check_stamp(); !s.ok()) return s;
  Error e = path_error(ErrorCode::io,
                       path_.string() + " changed since it was opened (its pages in [" + std::to_string(offset) +
                           ", +" + std::to_string(length) + ") are gone: truncated)",
                       path_);
  e.offset = offset;
  return e;
}

Status MappedFile::read(std::uint64_t offset, std::span<std::byte> dst) const {
  if (Status s = check_range("reading", offset, dst.size()); !s.ok()) return s;
  if (Status s = check_unchanged(); !s.ok()) return s;
  if (g_read_hook) g_read_hook(*this);
  if (!guarded_copy(dst.data(), data_ + offset, dst.size())) {
    // guarded_copy jumps out and maps nothing: the pages stay unmapped, yet
    // a file put back later would make later reads return its bytes. Refuse
    // them anyway: the file was seen changing under the mapping once.
    poisoned_.store(true, std::memory_order_release);
    return pages_gone(offset, dst.size());
  }
  // Rewritten (same size) while we copied: the bytes may be a mix.
  return check_unchanged();
}

Status MappedFile::transfer(std::uint64_t offset, std::uint64_t length,
                            const std::function<Status(Bytes)>& sink) const {
  if (Status s = check_range("transferring", offset, length); !s.ok()) return s;
  if (Status s = check_unchanged(); !s.ok()) return s;
  const Bytes range = bytes().subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(length));
  ZeroFillRange zero_fill(range.data(), range.size(), &poisoned_);
  if (!zero_fill.armed()) {
    Error e = path_error(ErrorCode::unavailable,
                         "cannot transfer [" + std::to_string(offset) + ", +" + std::to_string(length) +
                             "): all " + std::to_string(ZeroFillRange::kSlots) +
                             " guards for transfers are in use and this thread holds one (a transfer inside a "
                             "transfer's sink), so waiting for one could deadlock",
                         path_);
    e.offset = offset;
    return e;
  }
  Status sunk = sink(range);
  // The pages lost read as zeros meanwhile: whatever `sink` made of them is wrong.
  if (zero_fill.disarm()) return pages_gone(offset, length);
  if (!sunk.ok()) return sunk;
  return check_unchanged();  // rewritten (same size) while `sink` read
}

}  // namespace ballast::store
