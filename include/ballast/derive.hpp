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
// Its kind lives in one place, `launch.kind`; kind() reads it. Whatever
// takes one checks it against its model first: an entry of another model,
// or edited out of its weight's type or size, is invalid_argument.
struct PlannedDerivation {
  std::string weight;  // the source weight (int4: B)
  ValueId source{};
  std::optional<ValueId> scales;       // int4; quant_int8_given_max: its rows' maxima (f32 [N])
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
// that consume them (and, per PlanOptions::source, planned by rules):
//   MatMulNBits (com.microsoft, bits=4) B  -> dequant_int4, repack_int4
//   2-D float32/float16/bfloat16 MatMul    -> transpose, to_f16 (float32 and
//   and Gemm B                                bfloat16), quant_int8 per output
//                                             channel (float32 and float16;
//                                             bfloat16: a PlanSkip)
// B is the weight itself, or a weight seen through Identity nodes and 2-D
// Transpose nodes (perm absent or [1, 0]: MatMul(x, Transpose(W)) plans W
// as stored [N, K], as Gemm transB=1 does), at most 16 nodes deep.
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

// ---- Derivations without a graph (docs/derivations.md, "Rules").
// safetensors checkpoints carry names only: rules say which derivations a
// weight gets from its name. A pattern is matched against the whole name:
// `*` matches any run of characters (dots too), `?` one character, and
// `{a,b,c}` one of the alternatives (nesting not allowed). A rule's
// derivations are of the weight as stored, one of:
//   transpose   2-D, any whole-byte type (e.g. a [N, K] Linear weight to the [K, N] a MatMul reads)
//   to_f16      2-D float32
//   quant_int8  2-D float32 or float16, per stored row (per output channel of a [N, K] weight)
// The int4 kinds need their scales and are planned from a graph (or GGUF).
// Every rule that matches a weight applies (a derivation two rules plan is
// planned once).
struct DerivationRule {
  std::string name;     // shown in the plan's `why`: "rule <name>"
  std::string pattern;  // e.g. "model.layers.*.self_attn.{q,k,v,o}_proj.weight"
  std::vector<Derivation> derivations;
  // Applies only to weights of these types (empty: every type). A weight of
  // another type does not match (it is not a skip).
  std::vector<DataType> dtypes;
  // Applies only when the model has no weight of this name (a tied head:
  // the embedding is the head when there is no lm_head.weight).
  std::string unless_present;
  // When set, a matching weight is a skip with this reason: a layout ballast
  // recognises but cannot derive (GPTQ/AWQ packed int4).
  std::string refuse;
};

// The rules for Hugging Face decoder checkpoints: model.layers.N.self_attn.
// {q,k,v,o}_proj.weight and mlp.{gate,up,down}_proj.weight get transpose (any
// type) and to_f16 (float32, bfloat16); lm_head.weight gets quant_int8 per output
// channel (float32, float16; to_f16 when bfloat16); a tied head, model.embed_
// tokens.weight when there is no lm_head.weight, the same; a GPTQ/AWQ `*.qweight`
// is a skip with the reason (its layout is not the int4 kinds'). GGUF's llama
// names: blk.N.{attn_q,attn_k,attn_v,attn_output,attn_qkv,ffn_gate,ffn_up,
// ffn_down}.weight, the experts' blk.N.ffn_{gate,up,down}_exps.weight,
// token_embd.weight and output.weight get dequant_gguf when block-quantized
// or bf16; float32/float16 layers get transpose (and to_f16 from float32),
// a float output.weight (or a tied token_embd.weight) quant_int8.
std::vector<DerivationRule> default_derivation_rules();

// Where a plan comes from.
enum class PlanSource : std::uint8_t {
  automatic,        // the graph when the model has one, else the rules (default_derivation_rules() when none are given)
  graph,            // the consuming nodes only (rules ignored)
  rules,            // the rules only, even for a model with a graph
  graph_and_rules,  // the graph's plan, then the rules' (a derivation both plan is planned once)
};

// What the plan leaves out, and why. From rules: a weight a rule matched
// but could not plan (its dtype or rank), or a rule that matched nothing.
// From the graph (`rule` empty, `node` set): a derivation a consuming node
// would get but its weight's type does not allow (quant_int8 of a bfloat16
// MatMul B), or a model-local function whose nodes are not read (`weight`
// empty, `node` the first node that calls it; docs/derivations.md).
struct PlanSkip {
  std::string rule;    // the rule's name; empty: the graph
  std::string weight;  // empty: the rule matched no weight, or a function
  std::string reason;
  std::string node;  // graph skips: the consuming (or calling) node
};

struct PlanOptions {
  double max_amplification = kDefaultMaxAmplification;  // <= 0: no cap
  PlanSource source = PlanSource::automatic;
  // Empty: default_derivation_rules() where rules are used.
  std::vector<DerivationRule> rules;
  // Receives every skip when set. When null a rule's skip is an error
  // (invalid_argument naming the rule and the weight): never a silent drop.
  // Default rules that match nothing are not skips (a model need not have
  // an lm_head); given rules that match nothing are. The graph's skips are
  // never errors (the model is valid: what applies is planned); they are
  // listed here.
  std::vector<PlanSkip>* skipped = nullptr;
};
Result<std::vector<PlannedDerivation>> plan_derivations(const Model& model, const PlanOptions& options = {});

// The derivation `kind` of the weight a node consumes (MatMul/Gemm: B;
// MatMulNBits: B with its scales and zero points). invalid_argument when the
// kind does not apply to that node.
Result<PlannedDerivation> plan_derivation(const Model& model, const NodeInfo& node, Derivation kind);
// The same for a weight by name, without a node: transpose (2-D, any
// whole-byte type), to_f16 (2-D float32 or bfloat16) and quant_int8 per
// stored row (2-D float32 or float16) of the weight as stored; the GGUF
// kinds (dequant_gguf, dequant_gguf_f32, repack_gguf_int4 of Q4_0/Q4_1) of
// a block-typed weight of any rank, its rows along ne[0].
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
// The memo is tied to ctx.sources' epoch (DerivedWeights::bind_sources):
// invalid_argument while it holds values derived from sources released
// since.
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
