// Changing a file under a live mapping, the ways a re-export in place does:
// truncating it, rewriting it at the same size, renaming a new file over it.
#pragma once

#include "support/text.hpp"
#include <ballast/weight_store.hpp>

#include "unit/store/scratch_dir.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

namespace ballast::testing {

inline std::vector<std::byte> byte_pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 131 + seed * 17 + 7) & 0xff);
  return out;
}

inline void write_file(const std::filesystem::path& p, const std::vector<std::byte>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline void truncate_file(const std::filesystem::path& p, std::uint64_t size) {
  REQUIRE(::truncate(p.c_str(), static_cast<off_t>(size)) == 0);
}

// Overwrites one byte in place (same size, same inode) and moves the
// modification time well away from the old one, so that file systems with
// coarse timestamps see the change too.
inline void rewrite_in_place(const std::filesystem::path& p) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const unsigned char x = 0x5a;
  CHECK(::pwrite(fd, &x, 1, 0) == 1);
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  times[1].tv_sec += 10;
  CHECK(::futimens(fd, times) == 0);
  ::close(fd);
}

// Rewrites one byte of `p` in place and dates it `seconds` and
// `nanoseconds` after its modification time before the write: a change
// seen in one field of the time alone.
inline void rewrite_in_place_dated(const std::filesystem::path& p, long seconds, long nanoseconds) {
  struct stat before {};
  REQUIRE(::stat(p.c_str(), &before) == 0);
  const int fd = ::open(p.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const unsigned char x = 0xa5;
  CHECK(::pwrite(fd, &x, 1, 0) == 1);
  struct timespec times[2] = {before.st_atim, before.st_mtim};
  times[1].tv_sec += seconds;
  times[1].tv_nsec = (times[1].tv_nsec + nanoseconds) % 1000000000L;
  CHECK(::futimens(fd, times) == 0);
  ::close(fd);
}

// Writes `bytes` next to `p` and renames it over `p`: a new inode at the
// path, with a modification time well after the old one's (as a later
// export has; file systems with coarse timestamps would otherwise give both
// the same).
inline void replace_file(const std::filesystem::path& p, const std::vector<std::byte>& bytes) {
  const std::filesystem::path tmp = p.string() + ".new";
  write_file(tmp, bytes);
  struct stat old {};
  REQUIRE(::stat(p.c_str(), &old) == 0);
  struct timespec times[2] = {old.st_atim, old.st_mtim};
  times[1].tv_sec += 10;
  REQUIRE(::utimensat(AT_FDCWD, tmp.c_str(), times, 0) == 0);
  std::filesystem::rename(tmp, p);
}

// An external weight of `file` as the loader records it (device + inode of
// the file as it is now).
inline WeightRef external_weight(const std::filesystem::path& file, std::uint64_t offset, std::uint64_t length) {
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  WeightRef w;
  w.dtype = DataType::uint8;
  w.dims = {static_cast<std::int64_t>(length)};
  w.storage = WeightRef::Storage::external;
  ExternalLocation loc;
  loc.file = std::make_shared<const ExternalFile>(ExternalFile{file.filename().string(), std::filesystem::canonical(file),
                                                               static_cast<std::uint64_t>(st.st_dev),
                                                               static_cast<std::uint64_t>(st.st_ino)});
  loc.offset = offset;
  loc.length = length;
  w.external = loc;
  return w;
}

// A 64 KiB file of a known pattern in a scratch folder, mapped by its own
// store, and a weight of bytes [offset, offset + length) of it.
struct MappedWeight {
  ScratchDir dir{"mapped-weight"};
  std::filesystem::path file;
  std::vector<std::byte> original;
  WeightStore store;
  MappingId mapping = 0;
  WeightRef weight;

  explicit MappedWeight(std::size_t size = 64 * 1024, std::uint64_t offset = 4096, std::uint64_t length = 8192) {
    file = dir / "w.bin";
    original = byte_pattern(size, 1);
    write_file(file, original);
    auto id = store.map_external(file);
    REQUIRE_MESSAGE(id.ok(), id.error().to_string());
    mapping = *id;
    weight = external_weight(file, offset, length);
  }
  std::vector<std::byte> slice(std::uint64_t offset, std::uint64_t length) const {
    return {original.begin() + static_cast<std::ptrdiff_t>(offset),
            original.begin() + static_cast<std::ptrdiff_t>(offset + length)};
  }
};

using ballast::testing::contains;

}  // namespace ballast::testing
