// TensorProto -> WeightRef: dtype, dims, and where the bytes are (borrowed
// raw_data or packed fixed-width field, owned decoded varints, or a
// validated external range).
#pragma once

#include "onnx/external_data.hpp"
#include "onnx/wire_reader.hpp"

#include <ballast/onnx_loader.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace ballast::onnx {

struct DecodedTensor {
  std::string_view name;  // the name the weight goes by (see decode)
  bool is_string = false;  // string tensors are listed, never weights
  WeightRef weight;        // dims and source are set for strings too

  // Back to a fresh state, field by field: assigning a whole new WeightRef
  // costs more than decoding a small tensor.
  void reset() noexcept {
    name = {};
    is_string = false;
    weight.dtype = DataType::undefined;
    weight.dims.clear();
    weight.source = WeightSource::initializer;
    weight.storage = WeightRef::Storage::inline_borrowed;
    weight.inline_bytes = {};
    weight.owned.reset();
    weight.external.reset();
  }
};

class TensorDecoder {
 public:
  TensorDecoder(std::string model_file, const LoadOptions& options, ExternalResolver& external,
                std::vector<LoadNote>& notes)
      : model_file_(std::move(model_file)), options_(options), external_(external), notes_(notes) {}

  // Decodes the TensorProto in `field` (a length-delimited field). The
  // weight is named `name_override` when that is not empty (a Constant
  // node's value is keyed by the node's output), else by the proto's name.
  // Fills `out` (reused by the caller: no per-tensor moves of the result).
  Status decode(const WireField& field, WeightSource source, std::string_view name_override, DecodedTensor& out);

  // The name field of a TensorProto, for messages about tensors that are
  // not decoded further (sparse values).
  static std::string_view name_of(const WireField& field);

 private:
  std::string model_file_;
  const LoadOptions& options_;
  ExternalResolver& external_;
  std::vector<LoadNote>& notes_;
  std::vector<ExternalEntry> entries_;  // reused: no allocation per external tensor
};

}  // namespace ballast::onnx
