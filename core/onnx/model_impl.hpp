// The inside of ballast::Model: everything the loader fills in.
#pragma once

#include <ballast/model.hpp>

#include "onnx/name_table.hpp"
#include "store/sigbus_guard.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ballast {

struct Model::Impl {
  ModelFormat format = ModelFormat::onnx;
  std::vector<ModelMetadata> metadata;
  std::filesystem::path path;
  std::uint64_t file_size = 0;
  WeightStore store;
  // The .onnx mapping, held here too: the node records and the tables built
  // from them on first use point into it even if the store is moved out.
  std::shared_ptr<const void> bytes_anchor;
  // The .onnx mapping armed for the model's lifetime: node records and
  // inline weights are read from it lazily, by ballast and by the engine,
  // and a page a truncation took must read zeros (and poison the file,
  // which Model::check_unchanged reports), never kill the process. Null for
  // a model decoded from caller-owned bytes, or when every slot was taken.
  std::unique_ptr<store::RegistrationArm> file_arm;

  // ValueId <-> name. Opening a model interns only the weights' names; the
  // other values the nodes name are interned the first time anyone asks for
  // an id or a name (an engine that only wants weights never pays for the
  // tens of thousands of activation names). Mutable for that one-time fill,
  // which std::call_once makes safe from concurrent const callers.
  mutable onnx::NameTable names;
  mutable std::once_flag node_values_interned;
  void intern_node_values() const {
    build_nodes();
    std::call_once(node_values_interned, [this] {
      for (std::string_view v : node_values)
        if (!v.empty()) names.intern(v);
    });
  }

  std::vector<ValueId> weight_order;

  // Where each node is (its NodeProto payload, validated by the loader) and
  // how deep, parents before the nodes of their subgraphs. The NodeInfo
  // table is built from these on first use, so opening a model pays for
  // walking its nodes but not for tabulating them.
  struct NodeRecord {
    Bytes payload;
    std::uint64_t payload_offset = 0;
    unsigned depth = 0;
  };
  std::vector<NodeRecord> node_records;
  mutable std::once_flag nodes_built;
  mutable std::vector<NodeInfo> nodes;
  // What the nodes' spans point into; frozen once built.
  mutable std::vector<std::string_view> node_values;
  mutable std::vector<IntAttribute> node_attributes;
  mutable std::vector<IntsAttribute> node_ints_attributes;
  mutable std::vector<std::int64_t> node_ints;  // the lists' values
  // The names given to unnamed nodes (onnx/node_names.hpp).
  mutable std::vector<std::string> generated_node_names;
  void build_nodes() const;
  // Model::producer()'s index: every node output to its node, built once.
  mutable std::once_flag producers_built;
  mutable std::unordered_map<std::string_view, const NodeInfo*> producers;

  std::vector<StringTensorInfo> string_tensors;
  std::vector<LoadNote> notes;
  std::vector<ModelFunction> functions;  // ModelProto.functions: counted, not read
  std::int64_t ir_version = 0;
  std::vector<std::pair<std::string, std::int64_t>> opsets;

  // For the loader: interns without first filling in the node values.
  ValueId intern(std::string_view name) { return ValueId{names.intern(name)}; }
};

namespace detail {
// The loaders' way into a Model (Model::impl is not public).
struct ModelAccess {
  static Model::Impl& impl(Model& model) noexcept { return *model.impl_; }
  static const Model::Impl& impl(const Model& model) noexcept { return *model.impl_; }
};
}  // namespace detail

}  // namespace ballast
