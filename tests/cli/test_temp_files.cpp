// The CLI's temporaries (support/temp_files): a signal that ends the
// process removes them and still ends it; a signal the process was told to
// ignore stays ignored; a file replaced atomically is whole or untouched.
#include "support/temp_files.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace cli = ballast::cli;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(BALLAST_BINARY_DIR) / "scratch" / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void create(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
}

// Runs `body` in a child and returns its wait status. The child starts with
// the signals at their default actions, as the ballast process does: the
// test runner's own crash handlers (doctest's) are not the CLI's.
template <typename F>
int in_child(F body) {
  const pid_t child = ::fork();
  if (child == 0) {
    for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_DFL);
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

}  // namespace

TEST_CASE(
    "SIGTERM, SIGINT and SIGPIPE remove the registered temporaries, not the released ones, and still end "
    "the process") {
  for (const int sig : {SIGTERM, SIGINT, SIGPIPE}) {
    const fs::path root = fresh_dir("temp-signal");
    const int status = in_child([&] {
      // The documented order: guard, create, created().
      cli::TempFileGuard pending(AT_FDCWD, (root / "pending.tmp").string());
      create(root / "pending.tmp");
      pending.created();
      cli::TempFileGuard renamed(AT_FDCWD, (root / "renamed.tmp").string());
      create(root / "renamed.tmp");
      renamed.created();
      renamed.release();  // in place by now: no longer the handler's
      ::raise(sig);
      ::_exit(3);  // not reached: the signal ends the process
    });
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK_FALSE(fs::exists(root / "pending.tmp"));
    CHECK(fs::exists(root / "renamed.tmp"));
    fs::remove_all(root);
  }
}

TEST_CASE("a file created after the signal's handler ran is removed by created() itself") {
  // The handler may run on another thread than the creator's, after the
  // guard and before the create: its unlink finds nothing, and the file
  // the create then makes must not outlive the process. Simulated in one
  // thread: the handler runs (its signal blocked, so the process goes on
  // until it is unblocked), then the file is created and created() called.
  // Before any case that registers a guard in the test process itself
  // (the handlers are installed once per process; doctest runs the cases
  // in file order), like the case after it.
  const fs::path root = fresh_dir("temp-late");
  const int status = in_child([&] {
    cli::TempFileGuard late(AT_FDCWD, (root / "late.tmp").string());
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &term, nullptr);
    // Not delivered yet; the handler must run first to set its flag, so it
    // is called here as the kernel would, through the installed action.
    struct sigaction now {};
    ::sigaction(SIGTERM, nullptr, &now);
    if (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN) ::_exit(4);  // no handler: nothing to test
    now.sa_handler(SIGTERM);  // unlinks (nothing there), re-raises: pending while blocked
    create(root / "late.tmp");
    late.created();                              // sees the flag: removes its own file
    ::sigprocmask(SIG_UNBLOCK, &term, nullptr);  // the pending SIGTERM ends the process
    ::_exit(3);
  });
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK_FALSE(fs::exists(root / "late.tmp"));
  fs::remove_all(root);
}

TEST_CASE("a signal the process ignores (nohup) stays ignored") {
  // The handlers are installed once per process, at the first guard: this
  // child ignores SIGHUP before that (the test process itself registers no
  // guard before this case, doctest running cases in file order).
  const fs::path root = fresh_dir("temp-ignored");
  const int status = in_child([&] {
    ::signal(SIGHUP, SIG_IGN);
    cli::TempFileGuard pending(AT_FDCWD, (root / "pending.tmp").string());
    create(root / "pending.tmp");
    pending.created();
    ::raise(SIGHUP);
  });
  CHECK(WIFEXITED(status));
  CHECK(fs::exists(root / "pending.tmp"));
  fs::remove_all(root);
}

TEST_CASE("temporary names stay under NAME_MAX and differ per call") {
  const std::string long_name(255, 'x');
  const std::string a = cli::temp_name_for(long_name), b = cli::temp_name_for(long_name);
  CHECK(a.size() <= 255);
  CHECK(a != b);
  CHECK(a.front() == '.');
}

TEST_CASE("write_file_atomically replaces a file whole, through a symlink, keeping its mode") {
  const fs::path root = fresh_dir("temp-atomic");
  const fs::path file = root / "out.txt";
  std::ofstream(file) << "old";
  ::chmod(file.c_str(), 0600);
  REQUIRE(cli::write_file_atomically(file, "new").ok());
  CHECK(slurp(file) == "new");
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  fs::create_symlink("out.txt", root / "link.txt");
  REQUIRE(cli::write_file_atomically(root / "link.txt", "through").ok());
  CHECK(fs::is_symlink(root / "link.txt"));
  CHECK(slurp(file) == "through");

  REQUIRE(cli::write_file_atomically("/dev/null", "streamed").ok());  // not replaced: written
  CHECK(fs::is_character_file("/dev/null"));
  CHECK(std::distance(fs::directory_iterator(root), fs::directory_iterator()) == 2);  // no temporary left
  fs::remove_all(root);
}

TEST_CASE("write_file_atomically past a file size limit: an io error, the earlier file untouched, no temporary") {
  const fs::path root = fresh_dir("temp-fsize");
  const fs::path file = root / "out.svg";
  std::ofstream(file) << "earlier";
  const int status = in_child([&] {
    const rlimit limit{1024, 1024};  // SIGXFSZ at its default action
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const ballast::Status s = cli::write_file_atomically(file, std::string(8192, 'x'));
    ::_exit(!s.ok() && s.error().file == file.string() ? 0 : 1);
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(slurp(file) == "earlier");
  CHECK(std::distance(fs::directory_iterator(root), fs::directory_iterator()) == 1);
  fs::remove_all(root);
}
