#include <ballast/model.hpp>
#include <ballast/onnx_loader.hpp>

#include "gguf/loader.hpp"
#include "onnx/load_errors.hpp"
#include "safetensors/header.hpp"
#include "safetensors/index.hpp"
#include "safetensors/loader.hpp"
#include "store/safe_open.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ballast {

namespace {

// Enough to tell the formats apart: safetensors needs 9 bytes, GGUF 4, an
// index's "weight_map" is among the first keys of most indexes (and the
// whole file is read when it is short).
constexpr std::size_t kSniffBytes = 4096;

// A JSON object whose first kSniffBytes lack "weight_map" may still be an
// index: one whose "metadata" comes first and is long (keys sorted, as the
// common writers sort them). The rest is searched in chunks up to the index
// cap's default; an object without the key there is not a model.
constexpr std::size_t kIndexScanChunk = std::size_t{1} << 20;

bool begins_json_object(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
  return i < text.size() && text[i] == '{';
}

// Whether the file holds "weight_map" past its first `from` bytes (and
// before LoadOptions' default max_header_bytes). A read error is a no.
bool weight_map_further_on(int fd, std::uint64_t size, std::uint64_t from) {
  static constexpr std::string_view kKey = "\"weight_map\"";
  const std::uint64_t end = std::min<std::uint64_t>(size, LoadOptions{}.max_header_bytes);
  std::string chunk(kIndexScanChunk + kKey.size(), '\0');
  // Each chunk starts kKey.size() - 1 bytes early, so a key cut by a chunk's
  // end is whole in the next.
  for (std::uint64_t at = from - (kKey.size() - 1); at < end;) {
    const std::uint64_t want = std::min<std::uint64_t>(chunk.size(), end - at);
    ssize_t n = 0;
    do n = ::pread(fd, chunk.data(), static_cast<std::size_t>(want), static_cast<off_t>(at));
    while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    if (std::string_view(chunk.data(), static_cast<std::size_t>(n)).find(kKey) != std::string_view::npos) return true;
    if (static_cast<std::uint64_t>(n) < kKey.size()) return false;
    at += static_cast<std::uint64_t>(n) - (kKey.size() - 1);
  }
  return false;
}

bool looks_like_onnx(const unsigned char* b, std::size_t n) {
  // A ModelProto starts with the key of one of its fields, with the wire
  // type that field has: ir_version (1) and model_version (5) are varints,
  // the others (producer, domain, doc_string, graph, opset_import,
  // metadata_props, training_info, functions) length-delimited. Exporters
  // write ir_version first (0x08); the rest is allowed in any order.
  if (n == 0) return false;
  const unsigned field = b[0] >> 3;
  const unsigned wire = b[0] & 7u;
  if (field == 1 || field == 5) return wire == 0;
  if ((field >= 2 && field <= 4) || (field >= 6 && field <= 8) || field == 14) return wire == 2;
  // Two-byte keys: training_info (20) and functions (25), length-delimited.
  return n >= 2 && b[1] == 0x01 && (b[0] == 0xa2 || b[0] == 0xca);
}

std::string first_bytes_hex(const unsigned char* b, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n && i < 8; ++i) {
    out += digits[b[i] >> 4];
    out += digits[b[i] & 15u];
  }
  return out;
}

}  // namespace

namespace {

Result<ModelFormat> detect_unchecked(const std::filesystem::path& path) {
  auto opened = store::open_regular(path);
  if (!opened) {
    Error e = std::move(opened.error());
    e.file = path.string();
    return std::move(e).with_context("telling the model's format");
  }
  // No readahead on this descriptor: the kernel would otherwise read the
  // next pages (the tensors of a safetensors file) along with the first.
  ::posix_fadvise(opened->fd.get(), 0, 0, POSIX_FADV_RANDOM);
  std::string head(kSniffBytes, '\0');
  ssize_t n = 0;
  do n = ::pread(opened->fd.get(), head.data(), head.size(), 0);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    Error e = make_error(ErrorCode::io, std::string("reading the model's first bytes: ") + std::strerror(errno));
    e.file = path.string();
    return e;
  }
  head.resize(static_cast<std::size_t>(n));
  const auto* b = reinterpret_cast<const unsigned char*>(head.data());
  const auto size = static_cast<std::uint64_t>(opened->st.st_size);
  auto refuse = [&](std::string why) {
    Error e = make_error(ErrorCode::unsupported, std::move(why));
    e.file = path.string();
    return e;
  };
  if (gguf::looks_like_gguf(std::as_bytes(std::span(head.data(), head.size())))) return ModelFormat::gguf;
  if (safetensors::looks_like_safetensors(std::as_bytes(std::span(head.data(), head.size())), size))
    return ModelFormat::safetensors;
  if (safetensors::looks_like_index(head)) return ModelFormat::safetensors_index;
  if (head.size() == kSniffBytes && size > kSniffBytes && begins_json_object(head) &&
      weight_map_further_on(opened->fd.get(), size, kSniffBytes))
    return ModelFormat::safetensors_index;
  if (looks_like_onnx(b, head.size())) return ModelFormat::onnx;
  if (head.empty()) return refuse("the file is empty");
  return refuse("not a model ballast reads (ONNX, safetensors, a safetensors index, GGUF); it begins with bytes " +
                first_bytes_hex(b, head.size()));
}

}  // namespace

Result<ModelFormat> detect_model_format(const std::filesystem::path& path) {
  try {
    return detect_unchecked(path);
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  Error e = make_error(ErrorCode::out_of_memory, "out of memory while telling the model's format");
  e.file = path.string();
  return e;
}

Result<Model> open_model(const std::filesystem::path& path, const LoadOptions& options) {
  // The loaders turn their own allocation failures into errors; this covers
  // the steps between them (an error's context, a Status's box).
  return onnx::out_of_memory_is_an_error(path, [&]() -> Result<Model> {
    BALLAST_ASSIGN_OR_RETURN(const ModelFormat format, detect_model_format(path));
    switch (format) {
      case ModelFormat::onnx: return load_onnx(path, options);
      case ModelFormat::safetensors: return safetensors::load_file(path, options);
      case ModelFormat::safetensors_index: return safetensors::load_index(path, options);
      case ModelFormat::gguf: return gguf::load(path, options);
    }
    return make_error(ErrorCode::internal, "open_model: a format without a loader");
  });
}

}  // namespace ballast
