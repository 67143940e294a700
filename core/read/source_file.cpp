#include "read/source_file.hpp"

#include <ballast/log.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ballast::read {

namespace {

Error named(ErrorCode code, const store::MappedFile& mapping, std::string message) {
  Error e = make_error(code, std::move(message));
  e.file = mapping.path().string();
  return e;
}

SourceFile through_mapping(const std::string& path, const std::string& why) {
  log_message(LogLevel::info, "read", path + " " + why + ": reading the mapped file through its mapping");
  SourceFile source;
  source.mapped = true;
  return source;
}

}  // namespace

Result<SourceFile> open_source(const store::MappedFile& mapping, bool direct) {
  const std::string path = mapping.path().string();
  // O_NONBLOCK: should the path name a FIFO now, the open must not wait for
  // a writer (the identity check below reads the mapping instead). It changes nothing for
  // reads of a regular file.
  const int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  SourceFile source;
  if (direct) {
    source.fd = store::Fd(::open(path.c_str(), flags | O_DIRECT));
    source.direct = static_cast<bool>(source.fd);
    if (!source.fd && (errno == ENOENT || errno == ENOTDIR)) return through_mapping(path, "is gone");
    if (!source.fd && errno == EINVAL)
      log_message(LogLevel::info, "read", path + ": the file system does not take O_DIRECT; reading it buffered");
    else if (!source.fd)
      return named(ErrorCode::io, mapping, "cannot open " + path + " to read it: " + std::strerror(errno));
  }
  if (!source.fd) {
    source.fd = store::Fd(::open(path.c_str(), flags));
    if (!source.fd && (errno == ENOENT || errno == ENOTDIR)) return through_mapping(path, "is gone");
    if (!source.fd) return named(ErrorCode::io, mapping, "cannot open " + path + " to read it: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(source.fd.get(), &st) != 0)
    return named(ErrorCode::io, mapping, "cannot stat " + path + ": " + std::strerror(errno));
  if (!(store::identity_of(st) == mapping.identity()))
    return through_mapping(path, "now names another file (inode " + std::to_string(mapping.identity().inode) +
                                     ", now " + std::to_string(static_cast<std::uint64_t>(st.st_ino)) +
                                     "; renamed over?)");
  if (static_cast<std::uint64_t>(st.st_size) != mapping.size())
    return named(ErrorCode::io, mapping,
                 path + " changed since it was opened (size " + std::to_string(mapping.size()) + ", now " +
                     std::to_string(static_cast<std::uint64_t>(st.st_size)) + ")");
  BALLAST_RETURN_IF_ERROR(mapping.check_unchanged());
  // Buffered: tell the kernel to read ahead far and drop behind. O_DIRECT
  // bypasses the page cache, so there is nothing to advise.
  if (!source.direct) (void)::posix_fadvise(source.fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  return source;
}

Error read_failed(const store::MappedFile& mapping, std::uint64_t offset, std::uint64_t length, int error) {
  Error e = named(ErrorCode::io, mapping,
                  "reading " + std::to_string(length) + " bytes of " + mapping.path().string() + " at offset " +
                      std::to_string(offset) + " failed: " + std::strerror(error));
  e.offset = offset;
  return e;
}

Error file_ended(const store::MappedFile& mapping, std::uint64_t at, std::uint64_t begin, std::uint64_t end) {
  Error e = named(ErrorCode::io, mapping,
                  mapping.path().string() + " ended at " + std::to_string(at) + " while reading [" +
                      std::to_string(begin) + ", " + std::to_string(end) + "): it changed since it was opened");
  e.offset = at;
  return e;
}

}  // namespace ballast::read
