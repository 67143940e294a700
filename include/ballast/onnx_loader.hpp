// load_onnx: memory-maps a .onnx file, decodes the protobuf wire format in
// place, and fills a WeightStore without copying weight bytes. open_model
// (model.hpp) reads ONNX through this same loader, and every other format.
#pragma once

#include <ballast/export.hpp>
#include <ballast/status.hpp>
#include <ballast/model.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <filesystem>
#include <span>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

Result<Model> load_onnx(const std::filesystem::path& path, const LoadOptions& options = {});

// Same decoder over bytes already in memory (fuzzing, tests). External data
// is resolved against `base_dir`; the caller keeps `bytes` alive as long as
// the Model (inline weights and node names point into them).
Result<Model> load_onnx_from_bytes(std::span<const std::byte> bytes, const std::filesystem::path& base_dir,
                                   const LoadOptions& options = {});

}  // namespace ballast

BALLAST_API_END
