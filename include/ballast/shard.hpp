// Shard plans for tensor parallelism: which bytes of each weight a rank of
// a tensor-parallel engine holds (issue 29, first step; docs/distributed.md).
//
//   ShardSpec spec{.world = 4, .rank = r};                 // rules: default_shard_rules()
//   auto plan = plan_shards(model, spec);                  // Result<ShardPlan>
//   for (const WeightShard& w : plan->weights) ...         // ranges (zero-copy) or strided views
//
// A rule maps weight names (the glob syntax of DerivationRule: `*`, `?`,
// `{a,b}`, matched against the whole name; the first matching rule wins) to
// a split:
//   replicated  every rank holds the whole weight (norms, row layers' biases)
//   column      the output features are split (q, k, v, gate, up; their biases)
//   row         the input features are split (o, down)
//   vocab       the vocabulary is split (embeddings, lm_head): the output axis
//               of a head, the looked-up axis of an embedding
// A weight no rule matches is replicated. A fused weight (a merged QKV,
// gate_up) is split part by part: `parts` gives each part's size along the
// split axis, each part is split across the ranks on its own, and a rank's
// shard is its slice of every part, in order.
//
// Which stored axis is "output" and which "input" depends on the format
// (the crux; docs/distributed.md has the table):
//   ONNX MatMul B, Gemm B    [K=in, N=out] row-major (Gemm transB: [N, K])
//                            column/vocab: the inner axis (strided)
//                            row: the outer axis (one byte range)
//   ONNX MatMulNBits B       [N=out, k_blocks, blob]; scales [N, k_blocks]
//                            (stored [N * k_blocks] or [N, k_blocks]); zero
//                            points [N, ceil(k_blocks / 2)] packed 4-bit, or
//                            [N, k_blocks]. column: the outer axis N, and
//                            scales and zero points the same rows (ranges);
//                            row: on k_blocks (strided), on whole blocks,
//                            and for packed zero points on whole bytes.
//   ONNX Gather data         [vocab, hidden]: vocab on the outer axis
//   safetensors (HF Linear)  [out, in]: column/vocab outer (ranges), row inner (strided)
//   GGUF                     ne[0] = in is innermost ([..., ne1, ne0] here):
//                            column/vocab outer, row on whole blocks of the type
//   anything else            as a Linear: [..., out, in] (1-D: [out])
// An ONNX weight takes its layout from the node that consumes it, so the
// same name (lm_head.weight) is the inner axis of an ONNX MatMul B
// [hidden, vocab] and the outer axis of a safetensors [vocab, hidden].
//
// Refusals (Error::tensor names the weight): a split axis (or a fused part)
// whose size is not a multiple of the world size (uneven splits are not
// planned; vLLM refuses them too), naming the weight, the size and the
// world; a split that breaks a block (GGUF types, MatMulNBits k-blocks,
// packed zero points, 4- and 6-bit elements), naming the sizes; world 0, a
// rank outside the world, a world above kMaxShardWorld (invalid_argument).
// A refusal this world causes (the same rules split every weight of a
// world of 1) also lists the worlds, of 2-16 and the powers of two, that
// would split every weight.
#pragma once

#include <ballast/export.hpp>
#include <ballast/derive.hpp>
#include <ballast/dims.hpp>
#include <ballast/model.hpp>
#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

enum class ShardSplit : std::uint8_t { replicated, column, row, vocab };
// "replicated", "column", "row", "vocab".
std::string_view shard_split_name(ShardSplit split) noexcept;
std::optional<ShardSplit> shard_split_from_name(std::string_view name) noexcept;

struct ShardRule {
  std::string name;     // shown in the plan ("rule" of each weight)
  std::string pattern;  // e.g. "model.layers.*.self_attn.{q,k,v}_proj.weight"
  ShardSplit split = ShardSplit::replicated;
  // A fused weight: each part's size along the split axis, in elements, in
  // stored order; they must add up to the axis. Empty: one part.
  std::vector<std::uint64_t> parts;
  // The same for parts of equal size (gate_up: 2) when the sizes follow
  // from the axis; 0 or 1: one part. Not together with `parts`.
  std::uint32_t equal_parts = 0;
};

// Hugging Face decoder names (model.layers.N.self_attn.{q,k,v,o}_proj,
// mlp.{gate,up,down}_proj, gate_up_proj as two equal parts, embed_tokens,
// lm_head; `.weight`, and `.qweight` for MatMulNBits-consumed ONNX weights)
// and GGUF llama names (blk.N.{attn_q,attn_k,attn_v,ffn_gate,ffn_up} column,
// {attn_output,ffn_down} row, the experts' ffn_*_exps alike, token_embd and
// output vocab); norms and row layers' biases replicated, column layers'
// biases column. A merged QKV's part sizes depend on the head counts, so
// it has no default: give it a rule with `parts`.
std::vector<ShardRule> default_shard_rules();

// At most this many ranks: plan_shards_all() holds world x weights shards
// (the largest world is 1,024).
inline constexpr std::uint32_t kMaxShardWorld = 4096;

struct ShardSpec {
  std::uint32_t world = 1;
  std::uint32_t rank = 0;
  // First match wins. Empty: default_shard_rules(). To override a few
  // weights and keep the defaults, put the overrides first and append
  // default_shard_rules().
  std::vector<ShardRule> rules;
};

// An inner-axis shard: `rows` runs of `row_bytes` bytes, one every
// `row_stride` bytes from `offset`. Read in place it is not one tensor; the
// `slice` derivation gathers it on the device (gather_launch, below).
struct StridedView {
  std::uint64_t offset = 0;
  std::uint64_t row_bytes = 0;
  std::uint64_t row_stride = 0;
  std::uint64_t rows = 0;
  std::uint64_t bytes() const noexcept { return row_bytes * rows; }
  friend bool operator==(const StridedView&, const StridedView&) = default;
};

// One weight's shard on one rank.
struct WeightShard {
  std::string weight;
  ValueId id{};
  ShardSplit split = ShardSplit::replicated;
  std::string rule;    // the rule's name; "" when no rule matched (replicated)
  std::string layout;  // how its axes were read, e.g. "MatMul B [K, N] of node 'lm_head'"
  int axis = -1;       // the stored axis that is split; -1 when whole
  std::uint32_t parts = 1;
  Dims dims;           // the shard's dims (MatMulNBits scales and zero points: [rows, blocks] unless stored 1-D)
  std::uint64_t device_bytes = 0;
  // Where the offsets below count from: the mapping of the weight's data
  // file (offsets in the file), or nullopt for a weight inline in the .onnx
  // (offsets in the weight's own bytes).
  std::optional<MappingId> mapping;
  // An outer-axis shard (and a whole weight): contiguous byte ranges, one
  // per part, zero-copy like any weight. Empty when `strided` is not.
  std::vector<ByteRange> ranges;
  // An inner-axis shard: one view per part.
  std::vector<StridedView> strided;
  bool contiguous() const noexcept { return strided.empty(); }
};

struct ShardTotals {
  // Bytes this rank needs from storage: the union of its ranges and the
  // rows its strided views take (each byte once, shared bytes too).
  std::uint64_t read_bytes = 0;
  std::uint64_t device_bytes = 0;    // sum of its shards' device bytes
  std::uint64_t gathered_bytes = 0;  // of which in strided shards (a slice derivation's input)
  std::uint64_t not_needed_bytes = 0;  // the model's referenced bytes this rank does not read
};

struct ShardPlan {
  std::uint32_t world = 1;
  std::uint32_t rank = 0;
  std::vector<WeightShard> weights;  // Model::weight_order()
  ShardTotals totals;
  // The model's referenced bytes (every weight whole, each byte once):
  // read_bytes + not_needed_bytes.
  std::uint64_t model_bytes = 0;
  // The rules (by name, in rule order) that decide no weight's split: no
  // weight's name matches them before an earlier rule does, or only
  // MatMulNBits scales and zero points do (which follow their B's rule). A
  // misspelt pattern would otherwise go unnoticed (the defaults name every
  // family's weights, so most of them decide nothing in any one model).
  std::vector<std::string> unmatched_rules;
};

Result<ShardPlan> plan_shards(const Model& model, const ShardSpec& spec);

// Every rank's plan (spec.rank is ignored): for reports and the
// cooperative load. The weights' splits are resolved once.
struct ShardPlans {
  std::vector<ShardPlan> ranks;
  // Bytes any rank needs, each once: every weight's shards cover it
  // exactly, so this is the model's referenced bytes.
  std::uint64_t union_bytes = 0;
  // What reading per rank costs: the sum of the ranks' read_bytes.
  std::uint64_t read_bytes_sum = 0;
  std::vector<std::string> unmatched_rules;  // as ShardPlan's
};
Result<ShardPlans> plan_shards_all(const Model& model, const ShardSpec& spec);

// ---- Derivations of shards.
// A planned derivation (plan_derivations of the whole model) applied to
// one rank's shards: the same kind with the launch's rows and columns of
// the rank's shard, so that its outputs are the rank's slice of the whole
// model's outputs. Every kind shards exactly, along whichever axes the
// split cut; where a kind reduces along the cut axis, the ranks combine:
//   quant_int8 keeps one scale per row (per output channel), the largest
//   magnitude of the whole row; a shard that holds part of each row (a
//   row-parallel weight's per-channel quantization) cannot compute it
//   alone, so its launch is quant_int8_given_max over the shard: each rank
//   takes its part's maxima, the ranks combine them by max
//   (share_row_maxima, cooperative_load.hpp), and each quantizes its part
//   with the whole row's, so its codes are the whole codes' columns and its
//   scales the whole scales, bit for bit.
// A launch whose rows and columns do not match the weight as stored (a
// layout this function does not know) is skipped with the reason (not
// derived differently: the ranks' outputs always equal the whole model's
// slices).
struct ShardDerivation {
  std::size_t planned = 0;                 // index in the plan given
  std::optional<DerivationLaunch> launch;  // the rank's launch (pointers zero); nullopt: skipped
  std::string skipped;                     // why, when skipped
  std::size_t source = 0;                  // the operands: indices in ShardPlan::weights
  std::optional<std::size_t> scales, zero_points;
  // quant_int8 of a MatMul B [K, N] reads its [N, K] transpose: transpose
  // the source shard first (rows = its K, cols = its N), then quantize.
  bool of_transposed = false;
};
Result<std::vector<ShardDerivation>> plan_shard_derivations(const Model& model, const ShardPlan& rank,
                                                            std::span<const PlannedDerivation> plan);

// ---- A strided shard gathered on the device.
// A process that keeps its weights in place (the mapping registered
// zero-copy, or the whole weight uploaded) gathers an inner-axis shard
// with one `slice` launch per part: part `part` of `shard` (a strided
// one), from the weight whose first byte is at device address `weight`.
// The launch's src is the first source row of the part's view (so it
// reads whole rows of the weight, inside it); dst is left 0 for the
// caller: the shard's dense array, the bytes cooperative_load would have
// gathered on the host. A shard of several views (a fused weight split on
// its inner axis) is unsupported: its dense rows hold every part's
// columns side by side, which one slice per part cannot write. Its element is the
// widest of 8, 4, 2 and 1 bytes dividing the run, the stride, the run's
// first byte and the source address, so any type (a block type's whole
// blocks too) moves as whole elements; dst must be aligned to it (an
// allocation's start is, and each part's bytes are a multiple of it). Errors (Error::context names the weight): a part
// the shard lacks (invalid_argument); rows that pass the weight's bytes
// (out_of_bounds).
Result<DerivationLaunch> gather_launch(const Model& model, const WeightShard& shard, std::size_t part,
                                       DevicePtr weight);

}  // namespace ballast

BALLAST_API_END
