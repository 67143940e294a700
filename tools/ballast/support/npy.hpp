// Writes NumPy .npy files (format version 1.0) so derived tensors can be
// checked with numpy.load.
#pragma once

#include <ballast/status.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace ballast::cli {

// A file-name-safe form of a tensor name ("model/layer.0:w" -> "model_layer.0_w").
// Not unique ("a/b" and "a_b" give the same stem): DumpDirectory names files.
std::string safe_file_stem(std::string_view name);

// The directory `derive --dump` writes into, held open as a handle. Files
// are created beneath that handle with O_CREAT | O_EXCL | O_NOFOLLOW, so a
// symlink planted in the directory is never followed and nothing outside
// it is ever written.
class DumpDirectory {
 public:
  // Creates `dir` (and its parents) when missing and opens it. With `sub`
  // (one name: a rank's `rank<R>`), the folder `sub` inside it, made and
  // opened beneath `dir`'s handle without following a symlink: the dump
  // directory's contents are not trusted (docs/security.md), and a planted
  // `rank0 -> elsewhere` must not send the files elsewhere.
  static Result<DumpDirectory> open(const std::filesystem::path& dir, const std::string& sub = {});

  DumpDirectory(DumpDirectory&& other) noexcept;
  DumpDirectory& operator=(DumpDirectory&& other) noexcept;
  DumpDirectory(const DumpDirectory&) = delete;
  DumpDirectory& operator=(const DumpDirectory&) = delete;
  ~DumpDirectory();

  // The name of the file for weight `weight`, output `suffix`: the safe
  // stem, `.suffix.npy`; when sanitizing changed the name or it had to be
  // cut to fit 255 bytes, a `~` and 16 hex digits of a hash of the full
  // name go before the suffix (`~` never survives sanitizing, so such a
  // name cannot meet an unchanged one).
  static std::string file_name(std::string_view weight, std::string_view suffix);

  // Writes weight `weight`'s output `suffix` as .npy (`descr` a NumPy type
  // string such as "<f2", "<f4", "|i1", "|u1", "<u4"), under a temporary
  // name renamed into place once whole (support/temp_files.hpp), so the
  // final name never holds a half file. A regular file left by an earlier
  // run is replaced; a symlink or anything else in its place is refused
  // and left alone, as is a second file of the same name in one run.
  // Returns the file's path.
  Result<std::filesystem::path> write_npy(std::string_view weight, std::string_view suffix, std::string_view descr,
                                          const std::vector<std::uint64_t>& shape, std::span<const std::byte> data);

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  DumpDirectory(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::filesystem::path path_;
  int fd_ = -1;
  std::unordered_set<std::string> written_;  // names created in this run
};

}  // namespace ballast::cli
