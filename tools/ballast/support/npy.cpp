#include "support/npy.hpp"

#include "support/temp_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>

namespace ballast::cli {

namespace {

// The .npy header (magic, version, length, dict, padding) for these values.
std::string npy_header(std::string_view descr, const std::vector<std::uint64_t>& shape) {
  std::string dims;
  // As NumPy spells the tuple: "()", "(5,)", "(3, 4)". A reader that counts
  // dimensions by the commas reads "(5, )" as two and "(3, 4,)" as one.
  for (std::size_t i = 0; i < shape.size(); ++i) dims += (i == 0 ? "" : ", ") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ',';
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + length (2) + header + '\n', padded to 64 bytes.
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  const auto len = static_cast<std::uint16_t>(header.size());
  std::string out = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  return out + header;
}

Status write_all(int fd, const void* data, std::size_t size, const std::filesystem::path& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Error e = make_error(ErrorCode::io, std::string("write failed: ") + std::strerror(errno));
      e.file = path.string();
      return e;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status();
}

std::string hex64(std::uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = digits[v & 15];
  return out;
}

// FNV-1a, 64 bits: not a defence against chosen collisions (the names come
// from the model being derived), only a short, stable tag per name.
std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

std::string safe_file_stem(std::string_view name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    out += ok ? c : '_';
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

Result<DumpDirectory> DumpDirectory::open(const std::filesystem::path& dir, const std::string& sub) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    Error e = make_error(ErrorCode::io, "cannot create dump directory: " + ec.message());
    e.file = dir.string();
    return e;
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    Error e = make_error(ErrorCode::io, std::string("cannot open dump directory: ") + std::strerror(errno));
    e.file = dir.string();
    return e;
  }
  if (sub.empty()) return DumpDirectory(dir, fd);
  // Beneath the handle, never through a symlink (O_NOFOLLOW: ELOOP).
  int sub_fd = -1;
  const bool one_name = sub.find('/') == std::string::npos && sub != "." && sub != "..";
  if (!one_name)
    errno = EINVAL;  // said as such, not as whatever errno an earlier call left
  else if (::mkdirat(fd, sub.c_str(), 0777) == 0 || errno == EEXIST)
    sub_fd = ::openat(fd, sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int saved = errno;
  ::close(fd);
  if (sub_fd < 0) {
    Error e = make_error(ErrorCode::io, std::string("cannot open dump directory (a folder of its own, not a symlink, "
                                                    "is needed): ") +
                                            std::strerror(saved));
    e.file = (dir / sub).string();
    return e;
  }
  return DumpDirectory(dir / sub, sub_fd);
}

DumpDirectory::DumpDirectory(DumpDirectory&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), written_(std::move(other.written_)) {}

DumpDirectory& DumpDirectory::operator=(DumpDirectory&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    written_ = std::move(other.written_);
  }
  return *this;
}

DumpDirectory::~DumpDirectory() {
  if (fd_ >= 0) ::close(fd_);
}

std::string DumpDirectory::file_name(std::string_view weight, std::string_view suffix) {
  constexpr std::size_t kMaxName = 255;  // NAME_MAX on every Linux file system
  const std::string tail = "." + safe_file_stem(suffix) + ".npy";
  std::string stem = safe_file_stem(weight);
  const std::string tag = "~" + hex64(fnv1a(weight));
  if (stem != weight || stem.size() + tail.size() > kMaxName) {
    stem.resize(std::min(stem.size(), kMaxName - tail.size() - tag.size()));
    stem += tag;
  }
  return stem + tail;
}

Result<std::filesystem::path> DumpDirectory::write_npy(std::string_view weight, std::string_view suffix,
                                                       std::string_view descr, const std::vector<std::uint64_t>& shape,
                                                       std::span<const std::byte> data) {
  const std::string name = file_name(weight, suffix);
  const std::filesystem::path path = path_ / name;
  auto refuse = [&](std::string why) {
    Error e = make_error(ErrorCode::io, std::move(why));
    e.file = path.string();
    e.tensor = std::string(weight);
    return e;
  };
  if (written_.count(name) != 0) {
    // Labels are unique (node names are made unique when the model opens,
    // docs/derivations.md) and a sanitized one carries its label's hash, so
    // this is a broken invariant, not the file system's refusal.
    Error e = refuse("two dumped tensors would share this file name; the second is not written");
    e.code = ErrorCode::internal;
    return e;
  }
  // What is in the file's place: a regular file left by an earlier run (or
  // by another run writing into this directory now) is replaced; anything
  // else, a symlink above all, stays untouched.
  struct stat st {};
  if (::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode))
      return refuse(std::string("refusing to write: ") +
                    (S_ISLNK(st.st_mode) ? "a symlink" : "something other than a regular file") +
                    " is in the dump file's place (left untouched)");
  } else if (errno != ENOENT) {
    return refuse(std::string("cannot inspect the existing file: ") + std::strerror(errno));
  }
  written_.insert(name);
  // Written under a temporary name and renamed into place whole: a failed
  // write (a full disk, a file size limit) or a signal never leaves a
  // truncated .npy under the final name, an earlier run's file stays until
  // the new one is complete, and two runs dumping into one directory at
  // once each replace a whole file with a whole file.
  const std::string temp = temp_name_for(name);
  // Guarded before it exists, and told once it does (temp_files.hpp): a
  // signal handled on another thread between the two would leave it.
  TempFileGuard guard(fd_, temp);
  const int fd = ::openat(fd_, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return refuse(std::string("cannot create a temporary file beside it: ") + std::strerror(errno));
  guard.created();
  const std::string header = npy_header(descr, shape);
  Status s = write_all(fd, header.data(), header.size(), path);
  if (s.ok()) s = write_all(fd, data.data(), data.size(), path);
  // On disk before its name is: a crash after the rename never leaves an
  // empty or partial file under the final name (as compact's outputs).
  if (s.ok() && ::fsync(fd) != 0) s = refuse(std::string("cannot flush: ") + std::strerror(errno));
  if (::close(fd) != 0 && s.ok()) s = refuse(std::string("close failed: ") + std::strerror(errno));
  if (s.ok() && ::renameat(fd_, temp.c_str(), fd_, name.c_str()) != 0)
    s = refuse(std::string("cannot rename into place: ") + std::strerror(errno));
  if (!s.ok()) ::unlinkat(fd_, temp.c_str(), 0);
  guard.release();
  if (s.ok()) ::fsync(fd_);  // the rename itself
  if (!s.ok()) {
    if (s.error().tensor.empty()) s.error().tensor = std::string(weight);
    return s.error();
  }
  return path;
}

}  // namespace ballast::cli
