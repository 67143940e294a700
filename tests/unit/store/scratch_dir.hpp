// A fresh directory under the build tree for one test, removed afterwards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace ballast::testing {

class ScratchDir {
 public:
  explicit ScratchDir(std::string_view name) {
    static int counter = 0;
    path_ = std::filesystem::path(BALLAST_BINARY_DIR) / "scratch" /
            (std::string(name) + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
    path_ = std::filesystem::canonical(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& rel) const { return path_ / rel; }

  // Writes `bytes` to `rel` (creating parent folders) and returns the path.
  std::filesystem::path write(const std::filesystem::path& rel, const std::vector<std::uint8_t>& bytes) const {
    auto p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::filesystem::path write(const std::filesystem::path& rel, std::string_view text) const {
    return write(rel, std::vector<std::uint8_t>(text.begin(), text.end()));
  }

  // Bytes 0, 1, 2, ... (mod 251) so that slices are recognisable.
  std::filesystem::path write_pattern(const std::filesystem::path& rel, std::size_t size) const {
    std::vector<std::uint8_t> bytes(size);
    for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::uint8_t>(i % 251);
    return write(rel, bytes);
  }

 private:
  std::filesystem::path path_;
};

}  // namespace ballast::testing
