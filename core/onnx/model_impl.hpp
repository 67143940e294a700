// The inside of ballast::Model: everything the loader fills in.
#pragma once

#include <ballast/onnx_loader.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ballast {

struct Model::Impl {
  std::filesystem::path path;
  std::uint64_t file_size = 0;
  WeightStore store;

  // Interned value names: one copy of each, packed into large chunks that
  // never move (no allocation per name); the map keys on views into them.
  class NameArena {
   public:
    std::string_view copy(std::string_view name);

   private:
    static constexpr std::size_t kChunk = 64 * 1024;
    std::vector<std::unique_ptr<char[]>> chunks_;
    std::size_t used_ = kChunk;  // bytes used in chunks_.back()
  };
  NameArena arena;
  std::vector<std::string_view> names;
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
