// A read-only memory mapping of one whole file. Weight bytes are borrowed
// from these mappings, so a MappedFile is held by shared_ptr and outlives
// every span handed out from it.
#pragma once

#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include "store/safe_open.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>

namespace ballast::store {

class MappedFile {
 public:
  // Maps `path` read-only (symlinks followed: the caller chose the path).
  // The type is checked on an O_PATH descriptor first, so a FIFO or a
  // device is never opened; the mapping is made from the descriptor that
  // was checked.
  static Result<std::shared_ptr<const MappedFile>> open(const std::filesystem::path& path);
  // Maps the regular file open on `fd` (`st` is its fstat). `path` is for
  // display only: nothing is opened by name. `fd` stays the caller's.
  static Result<std::shared_ptr<const MappedFile>> map(int fd, const struct stat& st, std::filesystem::path path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return size_; }
  FileIdentity identity() const noexcept { return identity_; }
  // Empty for a zero-length file (nothing is mapped then).
  Bytes bytes() const noexcept { return {data_, static_cast<std::size_t>(size_)}; }

 private:
  MappedFile() = default;

  std::filesystem::path path_;
  std::uint64_t size_ = 0;
  FileIdentity identity_;
  const std::byte* data_ = nullptr;
};

}  // namespace ballast::store
