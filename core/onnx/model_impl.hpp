// The inside of ballast::Model: everything the loader fills in.
#pragma once

#include <ballast/onnx_loader.hpp>

#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ballast {

struct Model::Impl {
  std::filesystem::path path;
  std::uint64_t file_size = 0;
  WeightStore store;

  // Interned value names. A deque never moves its strings, so the map can
  // key on views into them: one copy of each name.
  std::deque<std::string> names;
  std::unordered_map<std::string_view, std::uint32_t> ids;

  std::vector<ValueId> weight_order;
  std::vector<NodeInfo> nodes;
  std::vector<StringTensorInfo> string_tensors;
  std::vector<LoadNote> notes;
  std::int64_t ir_version = 0;
  std::vector<std::pair<std::string, std::int64_t>> opsets;

  ValueId intern(std::string_view name);
};

}  // namespace ballast
