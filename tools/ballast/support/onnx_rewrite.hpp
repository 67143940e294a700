// Rewriting the external_data entries of an ONNX model's TensorProtos in the
// protobuf wire format, everything else copied byte for byte (`ballast
// compact`). The CLI sees only ballast's public headers, so this is a small
// wire walker of its own, not core/onnx's reader.
//
// The walk follows every path on which a TensorProto can sit:
//   ModelProto.graph (7), .training_info (20: initialization 1, algorithm 2),
//   .functions (25: FunctionProto.node 7)
//   GraphProto.node (1), .initializer (5), .sparse_initializer (15)
//   NodeProto.attribute (5)
//   AttributeProto.t (5), .g (6), .tensors (10), .graphs (11),
//   .sparse_tensor (22), .sparse_tensors (23)
//   SparseTensorProto.values (1), .indices (2)
// A message on the path whose content changes is written again with its new
// length prefix, and so is every message that encloses it; any other field
// (and every message with nothing to change) is copied verbatim.
#pragma once

#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ballast::cli {

// One TensorProto whose data_location is EXTERNAL (1), as the walk met it.
struct ExternalTensor {
  std::string_view name;                                     // TensorProto.name (may be empty: a Constant's value)
  std::vector<std::pair<std::string, std::string>> entries;  // external_data in file order
  std::uint64_t at = 0;                                      // offset of the TensorProto's payload in the .onnx
};

// Given a tensor, the entries to write instead (key, value; written where
// the first external_data entry was, in this order); an error stops the
// rewrite and is returned as it is.
using ExternalRewrite = std::function<Result<std::vector<std::pair<std::string, std::string>>>(const ExternalTensor&)>;

// The model `onnx` with every external tensor's entries replaced by what
// `rewrite` returns. malformed when the bytes are not a well-formed wire
// format along the walk (groups, truncated fields, lengths past the end).
Result<std::string> rewrite_external_data(Bytes onnx, const ExternalRewrite& rewrite);

}  // namespace ballast::cli
