// Which derivations apply to which weights of a model, read off the nodes
// that consume them. This is the engine-side knowledge `ballast derive`
// needs: the library's derivations take shapes, the graph supplies them.
#pragma once

#include <ballast/derivation.hpp>
#include <ballast/onnx_loader.hpp>

#include <string>
#include <vector>

namespace ballast::cli {

struct PlannedDerivation {
  Derivation kind = Derivation::transpose;
  std::string weight;  // the source weight (for int4: B)
  ValueId source{};    // its id
  // int4 only: the other operands
  std::optional<ValueId> scales;
  std::optional<ValueId> zero_points;
  // For quant_int8 on a MatMul weight [K, N]: quantise the transposed
  // [N, K] copy (per output channel), i.e. the transpose derivation's value.
  bool of_transposed = false;
  DerivationLaunch launch;  // shape/type fields filled, pointers zero
};

// MatMulNBits (com.microsoft, bits=4) B -> dequant_int4, repack_int4;
// 2-D float/float16 MatMul and Gemm weights -> transpose, to_f16 (float
// sources only), quant_int8 (per output channel). Weights consumed by
// several nodes are planned once. Errors name the node when its inputs or
// attributes do not fit the operator's definition.
Result<std::vector<PlannedDerivation>> plan_derivations(const Model& model);

}  // namespace ballast::cli
