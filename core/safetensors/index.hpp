// A sharded checkpoint's index (model.safetensors.index.json): a JSON
// object whose "weight_map" names the shard file of every tensor, and an
// optional "metadata" object (total_size, ...). Other keys are ignored.
#pragma once

#include <ballast/status.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ballast::safetensors {

struct IndexFile {
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> shard, in file order
  std::vector<std::pair<std::string, std::string>> metadata;    // strings and integers, as text
  bool has_weight_map = false;
};

// Parses the index JSON. Duplicate tensor names (and duplicate keys at any
// level ballast reads) are refused, as is anything but a string as a
// shard. Errors name the tensor; offsets are within `json`.
Result<IndexFile> parse_index(std::string_view json, std::uint32_t max_tensors,
                              std::uint64_t max_string_bytes = std::uint64_t{16} << 20);

// Whether `json`'s first bytes look like an index: an object, and
// "weight_map" among its first bytes. Used to tell formats apart (open_model
// searches the rest of an object that lacks it there).
bool looks_like_index(std::string_view first_bytes) noexcept;

// The index's `size` bytes from `fd` (the size its fstat gave), refused
// over `cap`; io when the file ends before `size` (it shrank while read) or
// a read fails. Errors carry `display` as their file.
Result<std::string> read_index_text(int fd, std::uint64_t size, std::uint64_t cap, const std::string& display);

}  // namespace ballast::safetensors
