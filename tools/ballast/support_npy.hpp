// Writes NumPy .npy files (format version 1.0) so derived tensors can be
// checked with numpy.load.
#pragma once

#include <ballast/status.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

namespace ballast::cli {

// `descr` is a NumPy type string such as "<f2", "<f4", "|i1", "|u1", "<u4".
Status write_npy(const std::filesystem::path& path, std::string_view descr, const std::vector<std::uint64_t>& shape,
                 std::span<const std::byte> data);

// A file-name-safe form of a tensor name ("model/layer.0:w" -> "model_layer.0_w").
std::string safe_file_stem(std::string_view name);

}  // namespace ballast::cli
