// One GGUF file's header: magic "GGUF", a u32 version (2 or 3), u64 tensor
// and metadata counts, the metadata key/value pairs, the tensor infos, zero
// padding to the alignment, then the data section every tensor's offset is
// relative to. parse_header checks all of it before any tensor is handed
// out, with checked arithmetic throughout (docs/sources.md lists each
// refusal and the reader bug it answers).
#pragma once

#include <ballast/data_type.hpp>
#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ballast::gguf {

struct HeaderLimits {
  std::uint64_t max_tensors = 131072;
  std::uint64_t max_metadata_entries = 65536;
  std::uint64_t max_array_elements = std::uint64_t{1} << 24;
  // One string's bytes, and every kept string's (keys, scalar values) in all.
  std::uint64_t max_string_bytes = std::uint64_t{16} << 20;
  std::uint64_t max_tensor_elements = std::uint64_t{1} << 40;
};

// Arrays inside arrays, at most this deep (no real file nests at all).
inline constexpr unsigned kMaxArrayDepth = 8;
// The specification's caps: a key and a tensor name.
inline constexpr std::uint64_t kMaxKeyBytes = 65535;
inline constexpr std::uint64_t kMaxNameBytes = 64;
inline constexpr unsigned kMaxDims = 4;
inline constexpr std::uint64_t kDefaultAlignment = 32;

struct TensorInfo {
  std::string name;
  DataType dtype = DataType::undefined;  // from the type id (dtype_from_gguf_type)
  std::vector<std::uint64_t> ne;  // ne[0] innermost, as the file gives them
  std::uint64_t offset = 0;       // relative to the data section
  std::uint64_t bytes = 0;
  std::uint64_t info_offset = 0;  // where its tensor info starts in the file, for messages
};

struct MetadataEntry {
  std::string key;
  std::string type;   // "uint32", "string", "array[float32]", ...
  std::string value;  // as ModelMetadata::value says; "" for arrays
  std::uint64_t count = 0;
};

// split.no / split.count / split.tensors.count, when the file has them.
struct Split {
  std::uint64_t no = 0;     // 0-based
  std::uint64_t count = 1;
  bool has_count = false;                // split.count was there (a part past the first needs it)
  std::optional<std::uint64_t> tensors;  // over every part; none when the key is absent
};

struct Header {
  std::uint32_t version = 0;
  std::uint64_t alignment = kDefaultAlignment;
  std::uint64_t header_bytes = 0;  // where the tensor infos end (the padding after is not header)
  std::uint64_t data_start = 0;    // header_bytes rounded up to the alignment
  std::vector<MetadataEntry> metadata;  // file order
  std::vector<TensorInfo> tensors;      // file order
  std::optional<Split> split;
};

// Parses and validates the GGUF file whose bytes are `file` (the whole
// file). Errors name the field, the key or tensor (Error::tensor) and the
// file offset; the caller fills in Error::file.
Result<Header> parse_header(Bytes file, const HeaderLimits& limits);

}  // namespace ballast::gguf
