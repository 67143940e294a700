// The inside of ballast::Model: everything the loader fills in.
#pragma once

#include <ballast/onnx_loader.hpp>

#include "onnx/name_table.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace ballast {

struct Model::Impl {
  std::filesystem::path path;
  std::uint64_t file_size = 0;
  WeightStore store;

  onnx::NameTable names;  // ValueId <-> name

  std::vector<ValueId> weight_order;
  std::vector<NodeInfo> nodes;
  // What the nodes' spans point into; filled while decoding, then frozen
  // (ModelDecoder::decode points the spans here only once nothing grows).
  std::vector<std::string_view> node_values;
  std::vector<IntAttribute> node_attributes;
  std::vector<StringTensorInfo> string_tensors;
  std::vector<LoadNote> notes;
  std::int64_t ir_version = 0;
  std::vector<std::pair<std::string, std::int64_t>> opsets;

  ValueId intern(std::string_view name) { return ValueId{names.intern(name)}; }
};

}  // namespace ballast
