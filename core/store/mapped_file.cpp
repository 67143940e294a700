#include "store/mapped_file.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <limits>

// Mappings are made with mmap(2) on the descriptor that was opened and
// checked, not with Boost.Interprocess: its file_mapping takes a path and
// opens it again, which is exactly the check-then-open race the loader
// must not have.
namespace ballast::store {

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), static_cast<std::size_t>(size_));
}

namespace {

Error path_error(ErrorCode code, std::string message, const std::filesystem::path& path) {
  Error e = make_error(code, std::move(message));
  e.file = path.string();
  return e;
}

}  // namespace

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
  mapped->size_ = size;
  mapped->identity_ = identity_of(st);
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

}  // namespace ballast::store
