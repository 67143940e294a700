#include "store/safe_open.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#ifndef SYS_openat2
#define SYS_openat2 437  // the same number on every architecture since Linux 5.6
#endif

namespace ballast::store {

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileIdentity identity_of(const struct stat& st) noexcept {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino)};
}

const char* file_kind_name(mode_t mode) noexcept {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

namespace {

std::atomic<bool> g_force_walk{false};
std::atomic<void (*)(const struct stat&)> g_before_reopen{nullptr};

constexpr int kReadFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
constexpr std::uint64_t kResolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
constexpr int kMaxSymlinks = 40;          // what the kernel allows in one lookup
constexpr std::size_t kMaxSteps = 16384;  // components walked for one location, symlinks expanded

int sys_openat2(int dirfd, const char* path, int flags, std::uint64_t resolve) noexcept {
  struct open_how how {};
  how.flags = static_cast<std::uint64_t>(flags);
  how.resolve = resolve;
  return static_cast<int>(::syscall(SYS_openat2, dirfd, path, &how, sizeof how));
}

Error not_regular(mode_t mode) {
  return make_error(ErrorCode::io, std::string("refusing to map ") + file_kind_name(mode) +
                                       " (only regular files hold weights)");
}

Error os_error(int err, const char* what) {
  if (err == ENOENT || err == ENOTDIR) return make_error(ErrorCode::not_found, "no such file");
  if (err == ENAMETOOLONG) return make_error(ErrorCode::io, "path or file name too long");
  if (err == ELOOP) return make_error(ErrorCode::io, "too many levels of symbolic links");
  if (err == ENOMEM) return make_error(ErrorCode::out_of_memory, std::string("out of memory while ") + what);
  return make_error(ErrorCode::io, std::string("cannot ") + what + ": " + std::strerror(err));
}

Error changed_while_opening() {
  return make_error(ErrorCode::io, "the file changed while it was being opened; nothing was read");
}

// Opens the file an O_PATH descriptor `probe` (whose fstat is `probe_st`)
// names for reading, through `open_again` (which repeats the same lookup),
// and insists on the same regular file.
template <class OpenAgain>
Result<OpenedFile> reopen_for_reading(const struct stat& probe_st, OpenAgain&& open_again) {
  if (!S_ISREG(probe_st.st_mode)) return not_regular(probe_st.st_mode);
  if (auto hook = g_before_reopen.load(std::memory_order_relaxed)) hook(probe_st);
  const int fd = open_again();
  if (fd < 0) {
    if (errno == ENOENT || errno == ELOOP || errno == EXDEV || errno == ENXIO || errno == EAGAIN)
      return changed_while_opening();
    return os_error(errno, "open");
  }
  OpenedFile out;
  out.fd = Fd(fd);
  if (::fstat(fd, &out.st) != 0) return os_error(errno, "stat");
  if (!S_ISREG(out.st.st_mode) || identity_of(out.st) != identity_of(probe_st)) return changed_while_opening();
  return out;
}

// The descriptors of a walk, innermost last. Entries borrowed from a Root
// are not closed.
class DirStack {
 public:
  struct Entry {
    int fd;
    bool owned;
    FileIdentity id;
  };
  DirStack() = default;
  DirStack(const DirStack&) = delete;
  DirStack& operator=(const DirStack&) = delete;
  ~DirStack() { clear(); }

  void clear() noexcept {
    for (const Entry& e : entries_)
      if (e.owned) ::close(e.fd);
    entries_.clear();
  }
  void push(Entry e) {
    try {
      entries_.push_back(e);
    } catch (...) {
      if (e.owned) ::close(e.fd);
      throw;
    }
  }
  void pop() noexcept {
    if (entries_.back().owned) ::close(entries_.back().fd);
    entries_.pop_back();
  }
  std::size_t size() const noexcept { return entries_.size(); }
  const Entry& top() const noexcept { return entries_.back(); }
  const Entry& operator[](std::size_t i) const noexcept { return entries_[i]; }

 private:
  std::vector<Entry> entries_;
};

// Appends the components of `text` to `pending` so that the first one is
// popped first (pending is used as a stack). "" and "." are dropped.
void push_components(std::vector<std::string>& pending, std::string_view text) {
  const std::size_t before = pending.size();
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('/', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(start, end - start);
    if (!part.empty() && part != ".") pending.emplace_back(part);
    start = end + 1;
  }
  std::reverse(pending.begin() + static_cast<std::ptrdiff_t>(before), pending.end());
}

Result<DirStack::Entry> open_dir_entry(int dirfd, const char* name) {
  const int fd = ::openat(dirfd, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return os_error(errno, "open a directory");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return os_error(err, "stat");
  }
  return DirStack::Entry{fd, true, identity_of(st)};
}

// The user-space resolver: one component at a time, every component opened
// O_PATH | O_NOFOLLOW relative to the descriptor of its parent, symlink
// text expanded here (never followed by the kernel), `..` taken from the
// descriptors already held. The final file must lie beneath a root: some
// directory on its chain has that root's identity, and everything below it
// is on the root's file system.
Result<OpenedFile> walk(std::span<const Root* const> roots, std::string_view location) {
  DirStack stack;
  stack.push({roots[0]->fd.get(), false, roots[0]->id});
  std::vector<std::string> pending;
  push_components(pending, location);
  int links = 0;
  std::size_t steps = 0;
  while (!pending.empty()) {
    const std::string name = std::move(pending.back());
    pending.pop_back();
    if (++steps > kMaxSteps) return make_error(ErrorCode::io, "too many path components to resolve");
    if (name == "..") {
      if (stack.size() > 1) {
        stack.pop();
        continue;
      }
      BALLAST_ASSIGN_OR_RETURN(auto parent, open_dir_entry(stack.top().fd, ".."));
      stack.pop();
      stack.push(parent);
      continue;
    }
    const int raw = ::openat(stack.top().fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (raw < 0) return os_error(errno, "open");
    Fd probe(raw);
    struct stat st {};
    if (::fstat(probe.get(), &st) != 0) return os_error(errno, "stat");
    if (S_ISLNK(st.st_mode)) {
      if (++links > kMaxSymlinks) return make_error(ErrorCode::io, "too many levels of symbolic links");
      std::string target(PATH_MAX, '\0');
      const ssize_t n = ::readlinkat(probe.get(), "", target.data(), target.size());
      if (n < 0) return os_error(errno, "read a symlink");
      if (static_cast<std::size_t>(n) >= target.size()) return make_error(ErrorCode::io, "symlink text too long");
      target.resize(static_cast<std::size_t>(n));
      if (target.empty()) return make_error(ErrorCode::not_found, "no such file");
      if (target.front() == '/') {
        BALLAST_ASSIGN_OR_RETURN(auto top, open_dir_entry(AT_FDCWD, "/"));
        stack.clear();
        stack.push(top);
      }
      push_components(pending, target);
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      stack.push({probe.release(), true, identity_of(st)});
      continue;
    }
    if (!pending.empty()) return make_error(ErrorCode::not_found, "no such file (a path component is not a directory)");

    // The final component: beneath which root?
    std::optional<std::size_t> root;
    for (std::size_t r = 0; r < roots.size() && !root; ++r) {
      for (std::size_t i = stack.size(); i-- > 0;) {
        if (stack[i].id != roots[r]->id) continue;
        bool same_device = identity_of(st).device == roots[r]->id.device;
        for (std::size_t j = i + 1; j < stack.size(); ++j) same_device = same_device && stack[j].id.device == roots[r]->id.device;
        if (same_device) root = r;
        break;
      }
    }
    if (!root) return make_error(ErrorCode::path_escapes, "resolves outside the model directory");
    const int dirfd = stack.top().fd;
    auto opened = reopen_for_reading(st, [&] { return ::openat(dirfd, name.c_str(), kReadFlags | O_NOFOLLOW); });
    if (opened) opened->root = *root;
    return opened;
  }
  return not_regular(S_IFDIR);  // only directories (or nothing) were named
}

}  // namespace

void force_component_walk_for_testing(bool on) noexcept { g_force_walk.store(on); }
void set_before_reopen_for_testing(void (*hook)(const struct stat&)) noexcept { g_before_reopen.store(hook); }

Result<Root> open_root(const std::filesystem::path& dir) {
  const std::filesystem::path& p = dir.empty() ? std::filesystem::path(".") : dir;
  const int fd = ::open(p.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    Error e = os_error(errno, "open the model directory");
    e.message = "model directory cannot be opened: " + e.message;
    return e;
  }
  Root root;
  root.fd = Fd(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return os_error(errno, "stat the model directory");
  root.id = identity_of(st);
  return root;
}

std::optional<Root> open_parent_of(int fd, const struct stat& st) {
  const std::filesystem::path self = path_of(fd, {});
  if (self.empty() || !self.has_filename()) return std::nullopt;
  auto root = open_root(self.parent_path());
  if (!root) return std::nullopt;
  struct stat entry {};
  if (::fstatat(root->fd.get(), self.filename().c_str(), &entry, AT_SYMLINK_NOFOLLOW) != 0) return std::nullopt;
  if (identity_of(entry) != identity_of(st)) return std::nullopt;
  return std::move(*root);
}

Result<OpenedFile> open_beneath(std::span<const Root* const> roots, std::string_view location) {
  if (roots.empty()) return make_error(ErrorCode::internal, "open_beneath without a root");
  const std::string path(location);
  if (!g_force_walk.load(std::memory_order_relaxed)) {
    const int dirfd = roots[0]->fd.get();
    const int raw = sys_openat2(dirfd, path.c_str(), O_PATH | O_CLOEXEC, kResolve);
    if (raw >= 0) {
      Fd probe(raw);
      struct stat st {};
      if (::fstat(probe.get(), &st) != 0) return os_error(errno, "stat");
      return reopen_for_reading(st, [&] { return sys_openat2(dirfd, path.c_str(), kReadFlags, kResolve); });
    }
    // ENOSYS and friends: no openat2 (or a sandbox that hides it). EXDEV,
    // ELOOP, EAGAIN: openat2 refused a symlink that leaves the directory
    // (absolute, `..` above it, a magic link) or a concurrent rename; the
    // walk decides whether a root still admits the target.
    const int err = errno;
    if (err != ENOSYS && err != EPERM && err != EINVAL && err != E2BIG && err != EOPNOTSUPP && err != EXDEV &&
        err != ELOOP && err != EAGAIN)
      return os_error(err, "open");
  }
  return walk(roots, location);
}

Result<OpenedFile> open_regular(const std::filesystem::path& path) {
  const int raw = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (raw < 0) return os_error(errno, "open");
  Fd probe(raw);
  struct stat st {};
  if (::fstat(probe.get(), &st) != 0) return os_error(errno, "stat");
  return reopen_for_reading(st, [&] { return ::open(path.c_str(), kReadFlags); });
}

std::filesystem::path path_of(int fd, const std::filesystem::path& fallback) {
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  std::string text(PATH_MAX, '\0');
  const ssize_t n = ::readlink(link.c_str(), text.data(), text.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= text.size()) return fallback;
  text.resize(static_cast<std::size_t>(n));
  if (text.front() != '/') return fallback;
  constexpr std::string_view deleted = " (deleted)";
  if (text.size() > deleted.size() && text.compare(text.size() - deleted.size(), deleted.size(), deleted) == 0)
    return fallback;
  return text;
}

}  // namespace ballast::store
