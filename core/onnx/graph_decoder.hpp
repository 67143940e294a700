// Walks ModelProto -> GraphProto -> NodeProto -> AttributeProto (and the
// subgraphs inside attributes) over the wire format, filling a Model.
#pragma once

#include "onnx/external_data.hpp"
#include "onnx/model_impl.hpp"
#include "onnx/tensor_decoder.hpp"
#include "onnx/wire_reader.hpp"

#include <string_view>
#include <vector>

namespace ballast::onnx {

// Subgraphs nest through attributes; deeper than this is an attack, not a model.
inline constexpr unsigned kMaxGraphDepth = 64;

// Fills model.nodes (and the tables their spans point into) from
// model.node_records; runs once, on first use (Model::Impl::build_nodes).
void build_node_table(Model::Impl& model);

class ModelDecoder {
 public:
  ModelDecoder(Model::Impl& model, std::string model_file, std::filesystem::path model_dir,
               const LoadOptions& options, std::optional<store::Root> real_model_dir = std::nullopt);

  // Decodes a whole ModelProto; offsets in errors are offsets in `bytes`.
  Status decode(Bytes bytes);

 private:
  Status decode_graph(const WireField& graph, unsigned depth);
  void reserve_for(const WireField& graph);
  void note_overridable_initializers();
  void note_functions();
  Status decode_node(const WireField& node, unsigned depth);
  // `output`: the Constant node's first output, which names the weight (never empty).
  Status decode_constant(const WireField& attribute, std::string_view attr_name, std::string_view output,
                         const WireField& node_field);
  Status add_weight(std::string_view name, WeightRef&& weight, std::uint64_t offset);
  Status add_tensor(const WireField& tensor, WeightSource source, std::string_view name_override);
  Error error_at(ErrorCode code, std::string message, std::string_view tensor, std::uint64_t offset) const;

  Model::Impl& model_;
  std::string model_file_;
  ExternalResolver external_;
  TensorDecoder tensors_;
  DecodedTensor decoded_;  // reused for every tensor
  std::vector<std::string_view> main_graph_inputs_;  // names in the mapped bytes
};

}  // namespace ballast::onnx
