#include "registry/plugin_file.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace ballast::registry {

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

const char* type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// The ssh rule: the owner is root or whoever runs this process, and no one
// else may write. Empty when `st` passes; else why not. `what` is "file" or
// "folder".
std::string ownership_problem(const struct stat& st, const char* what) {
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me) {
    return std::string(what) + " owned by uid " + std::to_string(st.st_uid) + ", neither root nor the running user (uid " +
           std::to_string(me) + ")";
  }
  const bool group = (st.st_mode & S_IWGRP) != 0;
  const bool others = (st.st_mode & S_IWOTH) != 0;
  if (group || others) {
    return std::string(what) + " writable by " +
           (group && others ? "group and others"
            : group         ? "group"
                            : "others") +
           " (mode " + octal_mode(st.st_mode) + "; chmod go-w makes it admissible)";
  }
  return {};
}

PluginCandidate refused(PluginCandidate c, std::string why) {
  c.verdict = PluginCandidate::Verdict::refused;
  c.reason = std::move(why);
  c.file = FileDescriptor();
  return c;
}

}  // namespace

PluginCandidate check_plugin_candidate(const std::string& folder, const std::string& file_name) {
  PluginCandidate c;
  c.path = folder + (folder.empty() || folder.back() == '/' ? "" : "/") + file_name;
  // The folder's own path may hold symlinks (lib64 -> lib): the engine or
  // the environment chose it. What is checked is what was opened.
  FileDescriptor dir(::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return c;  // no such folder (or not one): nothing there to refuse
  c.file = FileDescriptor(::openat(dir.get(), file_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (c.file.get() < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return c;
    // O_NOFOLLOW on a symlink: ELOOP (Linux), EMLINK or EFTYPE elsewhere.
    if (err == ELOOP) return refused(std::move(c), "a symlink (plugin files are never followed through links)");
    return refused(std::move(c), std::string("cannot be opened: ") + std::strerror(err));
  }
  struct stat dir_st {};
  struct stat st {};
  if (::fstat(dir.get(), &dir_st) != 0 || ::fstat(c.file.get(), &st) != 0) {
    return refused(std::move(c), std::string("cannot stat: ") + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return refused(std::move(c), type_name(st.st_mode));
  if (auto why = ownership_problem(st, "file"); !why.empty()) return refused(std::move(c), why);
  if (auto why = ownership_problem(dir_st, "folder"); !why.empty()) return refused(std::move(c), why);
  // O_NONBLOCK stays set: nothing reads through this descriptor, and the
  // dynamic loader opens its own description of the file through /proc.
  c.verdict = PluginCandidate::Verdict::admitted;
  return c;
}

Result<SharedLibrary> open_checked_library(PluginCandidate&& admitted) {
  if (admitted.verdict != PluginCandidate::Verdict::admitted || admitted.file.get() < 0) {
    return make_error(ErrorCode::internal, "open_checked_library given a candidate that was not admitted");
  }
  const std::string fd_path = "/proc/self/fd/" + std::to_string(admitted.file.get());
  void* handle = ::dlopen(fd_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    Error e = make_error(ErrorCode::io, "dlopen failed for " + admitted.path + " (opened as " + fd_path +
                                            (::access("/proc/self/fd", F_OK) != 0 ? ", and /proc is not mounted" : "") +
                                            "): " + (why != nullptr ? why : "unknown reason"));
    e.file = admitted.path;
    return e;
  }
  (void)admitted.file.release();  // see the header: the number must stay taken
  return SharedLibrary{handle, admitted.path};
}

}  // namespace ballast::registry
