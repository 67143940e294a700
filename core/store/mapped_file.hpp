// A read-only memory mapping of one whole file. Weight bytes are borrowed
// from these mappings, so a MappedFile is held by shared_ptr and outlives
// every span handed out from it.
#pragma once

#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>

namespace ballast::store {

class MappedFile {
 public:
  // Maps `path` read-only. Refuses anything but a regular file before
  // opening it: opening a FIFO would block, and a device or directory has
  // no meaningful byte range.
  static Result<std::shared_ptr<const MappedFile>> open(const std::filesystem::path& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return size_; }
  // Empty for a zero-length file (nothing is mapped then).
  Bytes bytes() const noexcept { return {data_, static_cast<std::size_t>(size_)}; }

 private:
  struct Region;
  MappedFile() = default;

  std::filesystem::path path_;
  std::uint64_t size_ = 0;
  const std::byte* data_ = nullptr;
  std::unique_ptr<Region> region_;
};

// ok when `path` (symlinks followed) is a regular file; otherwise not_found
// or io naming what it is instead (FIFO, device, directory, ...).
Status require_regular_file(const std::filesystem::path& path);

}  // namespace ballast::store
