#include "support/temp_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <mutex>
#include <utility>

namespace ballast::cli {

namespace {

// The registry is read by a signal handler, so it takes no lock: slots are
// atomic pointers in chunks that are never freed. An entry taken out of its
// slot is freed only while no handler runs (g_dying): a handler may have
// read its pointer just before.
struct Entry {
  int dir_fd;
  std::string name;
  // Between the guard and TempFileGuard::created(): the file may be being
  // created right now, on another thread than the handler's.
  std::atomic<bool> creating{true};
};

struct Chunk {
  std::array<std::atomic<Entry*>, 256> slots{};
  std::atomic<Chunk*> next{nullptr};
};

Chunk g_first;
std::atomic<bool> g_dying{false};

// SIGPIPE too: `ballast derive --dump D ... | head` ends by it mid-dump.
constexpr int kEndingSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};

// Whether any registered file is between its guard and created().
bool any_creating() {
  for (Chunk* c = &g_first; c != nullptr; c = c->next.load())
    for (auto& slot : c->slots)
      if (const Entry* e = slot.load(); e != nullptr && e->creating.load()) return true;
  return false;
}

void remove_all_and_reraise(int sig) {
  g_dying.store(true);
  const int saved = errno;
  // A creation in flight on another thread is let finish (at most 200 ms:
  // it may be this very thread's, interrupted), so its file exists when
  // the names are unlinked below. One that starts after this is removed by
  // its own created(), which sees g_dying.
  for (int ms = 0; ms < 200 && any_creating(); ++ms) {
    const struct timespec one_ms { 0, 1000000 };
    ::nanosleep(&one_ms, nullptr);
  }
  for (Chunk* c = &g_first; c != nullptr; c = c->next.load())
    for (auto& slot : c->slots)
      if (const Entry* e = slot.load()) ::unlinkat(e->dir_fd, e->name.c_str(), 0);
  // Blocked while this handler runs: delivered, with the default action,
  // as the handler returns.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  errno = saved;
}

void let_the_write_fail(int) {}  // SIGXFSZ: write() returns EFBIG instead

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    const auto install = [](int sig, void (*handler)(int)) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0) return;
      if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) return;  // someone else's choice
      struct sigaction sa {};
      sa.sa_handler = handler;
      sigemptyset(&sa.sa_mask);
      for (int other : kEndingSignals) sigaddset(&sa.sa_mask, other);  // one cleanup at a time per thread
      sa.sa_flags = SA_RESTART;
      ::sigaction(sig, &sa, nullptr);
    };
    for (int sig : kEndingSignals) install(sig, remove_all_and_reraise);
    install(SIGXFSZ, let_the_write_fail);
  });
}

std::atomic<Entry*>* add(int dir_fd, std::string_view name) {
  install_handlers();
  auto* entry = new Entry{dir_fd, std::string(name)};
  for (Chunk* c = &g_first;;) {
    for (auto& slot : c->slots) {
      Entry* empty = nullptr;
      if (slot.compare_exchange_strong(empty, entry)) return &slot;
    }
    Chunk* next = c->next.load();
    if (next == nullptr) {
      auto* fresh = new Chunk;
      if (c->next.compare_exchange_strong(next, fresh)) {
        next = fresh;
      } else {
        delete fresh;  // another thread added one: `next` now holds it
      }
    }
    c = next;
  }
}

void remove(void* slot) noexcept {
  Entry* e = static_cast<std::atomic<Entry*>*>(slot)->exchange(nullptr);
  if (e != nullptr && !g_dying.load()) delete e;
}

Error io_error(std::string what, const std::filesystem::path& path, int err) {
  Error e = make_error(ErrorCode::io, what + ": " + std::strerror(err));
  e.file = path.string();
  return e;
}

}  // namespace

TempFileGuard::TempFileGuard(int dir_fd, std::string_view name) : slot_(add(dir_fd, name)) {}

TempFileGuard::TempFileGuard(TempFileGuard&& other) noexcept : slot_(std::exchange(other.slot_, nullptr)) {}

TempFileGuard& TempFileGuard::operator=(TempFileGuard&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = std::exchange(other.slot_, nullptr);
  }
  return *this;
}

TempFileGuard::~TempFileGuard() { release(); }

void TempFileGuard::created() noexcept {
  // The handler sets g_dying, waits for every creation in flight to get
  // here, then unlinks; this marks the creation done after the file
  // exists, then reads the flag. A handler that began first and waited
  // finds the file; one that gave up waiting (or this thread's own, whose
  // creation it interrupted) unlinks it if the create had finished; a
  // create that finished after the handler's pass is removed here. Left:
  // a guard registered after the handler's pass whose create completes
  // before the process ends and this runs (microseconds).
  if (slot_ == nullptr) return;
  Entry* e = static_cast<std::atomic<Entry*>*>(slot_)->load();
  if (e == nullptr) return;
  e->creating.store(false);
  if (g_dying.load()) ::unlinkat(e->dir_fd, e->name.c_str(), 0);
}

void TempFileGuard::release() noexcept {
  if (slot_ != nullptr) remove(std::exchange(slot_, nullptr));
}

std::string temp_name_for(std::string_view final_name) {
  static std::atomic<std::uint64_t> counter{0};
  // '.' first: hidden, and never a name a dump or a compact writes (their
  // names never start with '.'). 200 bytes of the final name at most, so
  // the whole stays under NAME_MAX (255).
  return "." + std::string(final_name.substr(0, 200)) + "." + std::to_string(::getpid()) + "." +
         std::to_string(counter.fetch_add(1)) + ".tmp";
}

Status write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::path target = path;
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    // A FIFO, a terminal, /dev/stdout: a stream, not a file to replace.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open", path, errno);
    for (std::size_t at = 0; at < bytes.size();) {
      const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = errno;
        ::close(fd);
        return io_error("cannot write", path, err);
      }
      at += static_cast<std::size_t>(n);
    }
    if (::close(fd) != 0) return io_error("cannot close", path, errno);
    return {};
  }
  if (exists) {
    std::error_code ec;
    const std::filesystem::path real = std::filesystem::canonical(path, ec);  // through a symlink to the file
    if (!ec) target = real;
  }
  std::filesystem::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  const std::string name = target.filename().string();
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return io_error("cannot open the directory to write into", path, errno);
  const std::string temp = temp_name_for(name);
  // Guarded before it exists, and told once it does (temp_files.hpp).
  TempFileGuard guard(dir_fd, temp);
  const int fd = ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    guard.release();  // before its directory's descriptor goes
    ::close(dir_fd);
    return io_error("cannot create a temporary file beside it", path, err);
  }
  guard.created();
  Status status;
  if (exists) ::fchmod(fd, st.st_mode & 07777);  // a replaced file keeps its mode
  for (std::size_t at = 0; status.ok() && at < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) status = io_error("cannot write", path, n < 0 ? errno : EIO);
    if (n > 0) at += static_cast<std::size_t>(n);
  }
  if (status.ok() && ::fsync(fd) != 0) status = io_error("cannot flush", path, errno);
  if (::close(fd) != 0 && status.ok()) status = io_error("cannot close", path, errno);
  if (status.ok() && ::renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0)
    status = io_error("cannot rename into place", path, errno);
  if (!status.ok()) ::unlinkat(dir_fd, temp.c_str(), 0);
  guard.release();
  if (status.ok()) ::fsync(dir_fd);  // the rename itself on disk
  ::close(dir_fd);
  return status;
}

}  // namespace ballast::cli
