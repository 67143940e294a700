// Opening safetensors models: one file, or a sharded checkpoint's index and
// the shards it names. Both give the same Model as ONNX (open_model in
// core/open picks the loader from the file's bytes).
#pragma once

#include <ballast/model.hpp>

#include <filesystem>

namespace ballast::safetensors {

// One .safetensors file: every tensor a weight, borrowed from the file's
// one mapping; its JSON header counted as the format's header bytes.
Result<Model> load_file(const std::filesystem::path& path, const LoadOptions& options);

// A *.safetensors.index.json: every shard its weight_map names opened once,
// beneath the index's directory with the ONNX external-data path rules.
// Tensors a shard holds but the index does not name are not weights: their
// bytes are dead, as an orphaned ONNX prefix's are.
Result<Model> load_index(const std::filesystem::path& path, const LoadOptions& options);

}  // namespace ballast::safetensors
