// Writing models whose weights live in external-data files, for the
// external-data and hostile-input tests.
#pragma once

#include "unit/onnx/load_helpers.hpp"
#include "unit/store/scratch_dir.hpp"

#include <string>
#include <utility>
#include <vector>

namespace ballast::testing {

using Entries = std::vector<std::pair<std::string, std::string>>;

// A float32 tensor of `elements` elements with the given external_data entries.
inline Proto external_tensor(std::string_view name, std::int64_t elements, const Entries& entries, int dtype = 1) {
  Proto t = onnx_proto::tensor(name, dtype, {elements});
  for (const auto& [k, v] : entries) {
    Proto e;
    e.str(1, k).str(2, v);
    t.msg(13, e);
  }
  t.varint(14, 1);
  return t;
}

inline Entries at(std::string location, std::uint64_t offset, std::optional<std::uint64_t> length = std::nullopt) {
  Entries e = {{"location", std::move(location)}, {"offset", std::to_string(offset)}};
  if (length) e.emplace_back("length", std::to_string(*length));
  return e;
}

// Writes model.onnx with these initializers into `dir` and loads it.
inline Result<Model> load_written(const ScratchDir& dir, std::initializer_list<Proto> initializers,
                                  const LoadOptions& options = {}) {
  Proto m = model_with(initializers);
  return load_onnx(dir.write("model.onnx", m.data), options);
}

}  // namespace ballast::testing
