// One safetensors file's header: the 8-byte little-endian length N, then N
// bytes of UTF-8 JSON (an object, which may be padded with trailing spaces),
// then the byte buffer every tensor's data_offsets are relative to.
// parse_header checks everything the specification requires before any
// tensor is handed out (docs/sources.md lists each refusal).
#pragma once

#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include "safetensors/dtypes.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ballast::safetensors {

struct HeaderLimits {
  std::uint64_t max_header_bytes = 100'000'000;
  std::uint32_t max_tensors = 131072;
  std::uint64_t max_tensor_elements = std::uint64_t{1} << 40;
  std::uint64_t max_metadata_bytes = std::uint64_t{16} << 20;
  bool allow_holes = false;
};

struct TensorEntry {
  std::string name;
  const Dtype* dtype = nullptr;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // data_offsets, relative to the byte buffer
  std::uint64_t end = 0;
};

struct Header {
  std::uint64_t json_bytes = 0;    // N
  std::uint64_t buffer_start = 0;  // 8 + N: where the byte buffer begins in the file
  std::vector<TensorEntry> tensors;  // in byte-buffer order (by begin, then end)
  std::vector<std::pair<std::string, std::string>> metadata;  // __metadata__, in file order
  std::vector<ByteRange> holes;      // file offsets of buffer bytes no tensor covers (allow_holes)
};

// Parses and validates the header of the safetensors file whose bytes are
// `file` (the whole file: the byte buffer is its tail). Errors name the
// tensor (Error::tensor), the field, and the file offset where it applies;
// the caller fills in Error::file.
Result<Header> parse_header(Bytes file, const HeaderLimits& limits);

// Whether `first_bytes` start like a safetensors file: a JSON object right
// after the 8-byte length. Used to tell formats apart (never as validation:
// parse_header checks the length).
bool looks_like_safetensors(Bytes first_bytes, std::uint64_t file_size) noexcept;

// The byte offset of the first byte of `text` that is not valid UTF-8;
// nullopt when it all is.
std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept;

}  // namespace ballast::safetensors
