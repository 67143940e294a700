// Opening GGUF models: one file, or every part of a split set, as the same
// Model as ONNX and safetensors (open_model in core/open picks the loader
// from the file's bytes).
#pragma once

#include <ballast/model.hpp>

#include <filesystem>

namespace ballast::gguf {

// A .gguf file: every tensor a weight (dims outermost first, ne reversed),
// borrowed from the file's one mapping; the magic, counts, metadata and
// tensor infos counted as the format's header bytes, the padding and any
// bytes no tensor covers as dead bytes. When its split.count says it is one
// of several parts, every part (named <prefix>-0000N-of-0000M.gguf beside
// it) is opened once, with the ONNX external-data path rules.
Result<Model> load(const std::filesystem::path& path, const LoadOptions& options);

// Whether the first bytes are GGUF's magic.
bool looks_like_gguf(Bytes first_bytes) noexcept;

}  // namespace ballast::gguf
