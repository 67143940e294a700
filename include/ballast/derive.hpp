// derive_weight(): from a model's weight to its memoized derived value in one call.
//
//   DeviceWeights sources(gpu, model.store());
//   DerivedWeights memo;
//   DeriveContext ctx{gpu, model, sources, memo};
//   auto plan = plan_derivations(model);                 // what applies to which weight, and why
//   auto all = derive_weights(ctx, *plan);                // launch all, synchronize once per wave, memoize
//   auto w = derive_weight(ctx, node, Derivation::dequant_int4);   // or one at a time
//   auto t = derive_weight(ctx, "lm_head.weight", Derivation::transpose);
//
// derive_weight() and derive_weights() resolve the operands through DeviceWeights,
// size and allocate the outputs, launch, synchronize (a kernel that fails
// asynchronously is never memoized), memoize under the full DerivationKey,
// and free what they allocated when anything fails. Errors name the weight
// and the node it was planned for. Full story: docs/derived_weights.md.
#pragma once

#include <ballast/export.hpp>
#include <ballast/derivation.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/status.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

// One derivation a model needs: which weight, for which consumer, with
// which shape. Pointers in `launch` are zero: derive_weight() fills them.
// Its kind lives in one place, `launch.kind`; kind() reads it.
struct PlannedDerivation {
  std::string weight;  // the source weight (int4: B)
  ValueId source{};
  std::optional<ValueId> scales;       // int4 only
  std::optional<ValueId> zero_points;  // int4 with zero points only
  // quant_int8 of a MatMul weight stored [K, N]: quantise per output
  // channel, i.e. the [N, K] transpose (itself a memoized derivation).
  bool of_transposed = false;
  std::string node;  // the consuming node it was planned for (empty: planned from the weight alone)
  std::string why;   // e.g. "MatMulNBits B: K=4096 N=11008 block 32"
  DerivationLaunch launch;

  Derivation kind() const noexcept { return launch.kind; }
};

// Every derivation that applies to the model's weights, read off the nodes
// that consume them:
//   MatMulNBits (com.microsoft, bits=4) B  -> dequant_int4, repack_int4
//   2-D float32/float16 MatMul and Gemm B  -> transpose, to_f16 (float32
//                                             only), quant_int8 per output channel
// A weight consumed by several nodes with the same parameters is planned
// once; consumers with different parameters (another scales tensor, a
// different shape on the same bytes) each get their own entry. Errors name
// the node whose inputs or attributes do not fit the operator.
//
// Bounded work: a plan whose derived bytes exceed `max_amplification`
// times the model's referenced source bytes (the union of the referenced
// ranges of its data files plus its inline weights) is refused with
// unsupported, naming both sizes and the ratio. Real models stay below
// 10x (an int4 B dequantized to f32 is 8x); a small hostile file (thousands
// of nodes over one shared blob) is far above. docs/security.md.
inline constexpr double kDefaultMaxAmplification = 64;
struct PlanOptions {
  double max_amplification = kDefaultMaxAmplification;  // <= 0: no cap
};
Result<std::vector<PlannedDerivation>> plan_derivations(const Model& model, const PlanOptions& options = {});

// The derivation `kind` of the weight a node consumes (MatMul/Gemm: B;
// MatMulNBits: B with its scales and zero points). invalid_argument when the
// kind does not apply to that node.
Result<PlannedDerivation> plan_derivation(const Model& model, const NodeInfo& node, Derivation kind);
// The same for a 2-D float weight by name, without a node: transpose and
// to_f16 of the weight as stored, quant_int8 per stored row.
Result<PlannedDerivation> plan_derivation(const Model& model, std::string_view weight, Derivation kind);

struct DeriveContext {
  GpuBackend& backend;
  const Model& model;
  DeviceWeights& sources;  // for backend and model.store()
  DerivedWeights& memo;    // released with the model, e.g. through a TeardownHost
};

struct DerivedValue {
  DevicePtr first = 0;   // the value, or the first half of a pair
  DevicePtr second = 0;  // pair kinds only
  DerivationKey key;     // what the memo holds it under
};

// Looks up, and on a miss builds once (single-flight across threads).
Result<DerivedValue> derive_weight(const DeriveContext& ctx, const PlannedDerivation& planned);
// plan_derivation() then derive_weight().
Result<DerivedValue> derive_weight(const DeriveContext& ctx, const NodeInfo& node, Derivation kind);
Result<DerivedValue> derive_weight(const DeriveContext& ctx, std::string_view weight, Derivation kind);

struct DeriveProgress {
  std::size_t done = 0;  // derivations memoized (or found memoized) so far
  std::size_t total = 0;
  std::uint64_t source_bytes_done = 0;
  std::uint64_t source_bytes_total = 0;
};
using DeriveProgressFn = std::function<void(const DeriveProgress&)>;

// derive_weights(): the loading fast path: launches every missing derivation without waiting,
// synchronizes once, and only then memoizes them; a failure frees everything
// this call allocated and memoizes nothing of that wave. Two waves: the
// quant_int8 entries that read a transposed copy run after the transposes
// they read. Returns one value per planned entry, in order. Concurrent
// derive_weights() calls on one memo may build the same value twice; the
// second writer frees its copy (the memo keeps the first).
Result<std::vector<DerivedValue>> derive_weights(const DeriveContext& ctx, std::span<const PlannedDerivation> plan,
                                                 const DeriveProgressFn& progress = {});

}  // namespace ballast

BALLAST_API_END
