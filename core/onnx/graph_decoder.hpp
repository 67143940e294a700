// Walks ModelProto -> GraphProto -> NodeProto -> AttributeProto (and the
// subgraphs inside attributes) over the wire format, filling a Model.
#pragma once

#include "onnx/external_data.hpp"
#include "onnx/model_impl.hpp"
#include "onnx/tensor_decoder.hpp"
#include "onnx/wire_reader.hpp"

namespace ballast::onnx {

// Subgraphs nest through attributes; deeper than this is an attack, not a model.
inline constexpr unsigned kMaxGraphDepth = 64;

class ModelDecoder {
 public:
  ModelDecoder(Model::Impl& model, std::string model_file, std::filesystem::path model_dir,
               const LoadOptions& options);

  // Decodes a whole ModelProto; offsets in errors are offsets in `bytes`.
  Status decode(Bytes bytes);

 private:
  Status decode_graph(const WireField& graph, unsigned depth);
  void reserve_for(const WireField& graph);
  Status decode_node(const WireField& node, unsigned depth);
  Status decode_constant(const WireField& attribute, std::string_view attr_name, std::string_view node_name,
                         std::string_view output, const WireField& node_field);
  Status add_weight(std::string_view name, WeightRef&& weight, std::uint64_t offset);
  Status add_tensor(const WireField& tensor, WeightSource source, std::string_view name_override);
  Error error_at(ErrorCode code, std::string message, std::string_view tensor, std::uint64_t offset) const;

  Model::Impl& model_;
  std::string model_file_;
  ExternalResolver external_;
  TensorDecoder tensors_;
  DecodedTensor decoded_;  // reused for every tensor

  // Where each node's lists lie in model_.node_values / node_attributes
  // (indexes, not spans: those tables grow until decode() ends).
  struct NodeSlices {
    std::size_t inputs_begin = 0, inputs_count = 0;
    std::size_t outputs_begin = 0, outputs_count = 0;
    std::size_t attributes_begin = 0, attributes_count = 0;
  };
  std::vector<NodeSlices> slices_;  // parallel to model_.nodes
  std::vector<std::string_view> inputs_, outputs_;  // reused by decode_node
};

}  // namespace ballast::onnx
