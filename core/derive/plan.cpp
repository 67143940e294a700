// Which derivations apply to which weights, read off the consuming nodes.
#include <ballast/derive.hpp>
#include <ballast/dtype.hpp>

#include "derive/amplification.hpp"
#include "derive/forwarding.hpp"
#include "derive/rules.hpp"

#include <span>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace ballast {
namespace {

Error node_error(const NodeInfo& node, std::string why, ErrorCode code = ErrorCode::invalid_argument) {
  Error e = make_error(code, std::move(why));
  e.tensor = std::string(node.name.empty() ? node.op_type : node.name);
  return e.with_context("planning derivations for " + std::string(node.op_type) + " node '" + std::string(node.name) +
                        "'");
}

// Every derivation one node asks for. `nothing` (an empty vector) when the
// node's weight is computed at run time or is not of a derivable type.
Result<std::vector<PlannedDerivation>> plan_nbits(const Model& model, const NodeInfo& node,
                                                  std::vector<PlanSkip>* skips) {
  std::vector<PlannedDerivation> out;
  if (const std::int64_t bits = node.int_attribute("bits").value_or(4); bits != 4) {
    // Only 4-bit codes are derived; other widths (ONNX Runtime also writes
    // 2 to 8) are listed, one skip per derivation not planned, not dropped.
    ValueId id;
    if (skips != nullptr && derive::weight_named(model, node.inputs.size() > 1 ? node.inputs[1] : "", id) != nullptr)
      for (Derivation kind : {Derivation::dequant_int4, Derivation::repack_int4})
        skips->push_back({"", std::string(node.inputs[1]),
                          std::string(derivation_name(kind)) + " reads 4-bit codes, not this MatMulNBits B of bits=" +
                              std::to_string(bits) + " (nothing is planned for it)",
                          std::string(node.name)});
    return out;
  }
  if (node.inputs.size() < 3) return node_error(node, "MatMulNBits needs inputs A, B and scales");
  ValueId b_id, s_id, zp_id;
  const WeightRef* b = derive::weight_named(model, node.inputs[1], b_id);
  const WeightRef* s = derive::weight_named(model, node.inputs[2], s_id);
  if (b == nullptr || s == nullptr) return out;  // computed at run time: nothing to derive ahead
  // The int4 kinds read B as uint8 bytes. The operator also allows int32
  // words (a valid model: listed skips, as for bits != 4); any other type
  // does not fit the operator. Checked here, or the plan would hold an
  // entry that derive's own check refuses after building the rest.
  if (b->dtype == DataType::int32) {
    if (skips != nullptr)
      for (Derivation kind : {Derivation::dequant_int4, Derivation::repack_int4})
        skips->push_back({"", std::string(node.inputs[1]),
                          std::string(derivation_name(kind)) + " reads a uint8 B, not this MatMulNBits' int32 B " +
                              "(nothing is planned for it)",
                          std::string(node.name)});
    return out;
  }
  if (b->dtype != DataType::uint8)
    return node_error(node, "MatMulNBits B must be uint8 (or int32); '" + std::string(node.inputs[1]) + "' is " +
                                std::string(dtype_name(b->dtype)));
  const WeightRef* zp = nullptr;
  if (node.inputs.size() > 3 && !node.inputs[3].empty()) {
    zp = derive::weight_named(model, node.inputs[3], zp_id);
    if (zp == nullptr) return out;
  }
  // Absent reads as 0: one test per attribute, and no dereference of an
  // empty optional for a condition to get wrong.
  const std::int64_t k = node.int_attribute("K").value_or(0), n = node.int_attribute("N").value_or(0),
                     bs = node.int_attribute("block_size").value_or(0);
  if (k <= 0 || n <= 0 || bs <= 0) return node_error(node, "MatMulNBits needs positive K, N and block_size attributes");
  // The launch holds a 32-bit block size: refuse what would not fit before
  // narrowing (2^32 + 16 must not become 16).
  if (static_cast<std::uint64_t>(bs) > std::numeric_limits<std::uint32_t>::max())
    return node_error(node, "MatMulNBits block_size " + std::to_string(bs) + " does not fit in 32 bits (at most " +
                                std::to_string(std::numeric_limits<std::uint32_t>::max()) + ")");
  DerivationLaunch l;
  l.src_type = s->dtype;
  l.rows = static_cast<std::uint64_t>(n);
  l.cols = static_cast<std::uint64_t>(k);
  l.block_size = static_cast<std::uint32_t>(bs);
  if (zp != nullptr) {
    if (zp->dtype == DataType::uint8) l.zero_points = ZeroPoints::packed_u4;
    else if (zp->dtype == s->dtype) l.zero_points = ZeroPoints::unpacked;
    else return node_error(node, "zero_points must be uint8 or the scales' type");
  }
  for (Derivation kind : {Derivation::dequant_int4, Derivation::repack_int4}) {
    l.kind = kind;
    auto sizes = derivation_sizes(l);
    if (!sizes.ok()) return node_error(node, sizes.error().to_string());
    if (sizes->src_bytes != b->byte_length() || sizes->scales_bytes != s->byte_length() ||
        (zp != nullptr && sizes->zero_point_bytes != zp->byte_length()))
      return node_error(node, "B, scales or zero_points sizes do not match K, N and block_size");
    PlannedDerivation p;
    p.weight = std::string(node.inputs[1]);
    p.source = b_id;
    p.scales = s_id;
    if (zp != nullptr) p.zero_points = zp_id;
    p.node = std::string(node.name);
    p.why = "MatMulNBits B: K=" + std::to_string(k) + " N=" + std::to_string(n) + " block " + std::to_string(bs);
    p.launch = l;
    out.push_back(std::move(p));
  }
  return out;
}

PlannedDerivation dense(Derivation kind, std::string weight, ValueId id, DataType type, std::uint64_t rows,
                        std::uint64_t cols, bool of_transposed) {
  PlannedDerivation p;
  p.weight = std::move(weight);
  p.source = id;
  p.of_transposed = of_transposed;
  p.launch.kind = kind;
  p.launch.src_type = type;
  p.launch.rows = rows;
  p.launch.cols = cols;
  return p;
}

// The dense weights already planned in each layout, in one planning pass.
// A weight read by many consumers is planned by the first (the rest would
// add only copies of its name, which a hostile file can make long: a name
// stored once, copied per consumer, would grow the plan past the file).
class DensePlanned {
 public:
  // true the first time `id` is planned with this layout.
  bool first(ValueId id, bool stored_nk) { return seen_.insert({id.index, stored_nk}).second; }

 private:
  std::set<std::pair<std::uint32_t, bool>> seen_;
};

Result<std::vector<PlannedDerivation>> plan_dense(const Model& model, const NodeInfo& node, DensePlanned& planned_dense,
                                                  std::vector<PlanSkip>* skips) {
  std::vector<PlannedDerivation> out;
  if (node.inputs.size() < 2) return out;
  const derive::Operand b = derive::forwarded_weight(model, node.inputs[1]);
  const WeightRef* w = b.w;
  if (w == nullptr || w->dims.size() != 2) return out;
  if (w->dtype != DataType::float32 && w->dtype != DataType::float16 && w->dtype != DataType::bfloat16) return out;
  const auto rows = static_cast<std::uint64_t>(w->dims[0]);
  const auto cols = static_cast<std::uint64_t>(w->dims[1]);
  // MatMul B and Gemm B without transB are [K, N]; with transB they are
  // [N, K]; a Transpose on the way from the weight swaps the two.
  const bool trans_b = node.op_type == "Gemm" && node.int_attribute("transB").value_or(0) != 0;
  const bool stored_nk = trans_b != b.transposed;
  if (!planned_dense.first(b.id, stored_nk)) return out;  // planned by an earlier consumer
  const std::string why = std::string(node.op_type) + " B " + (stored_nk ? "[N, K] = [" : "[K, N] = [") +
                          std::to_string(rows) + ", " + std::to_string(cols) + "]" +
                          (b.via.empty() ? "" : " through " + derive::via_text(b));
  const std::string name(b.name);
  out.push_back(dense(Derivation::transpose, name, b.id, w->dtype, rows, cols, false));
  if (w->dtype != DataType::float16) out.push_back(dense(Derivation::to_f16, name, b.id, w->dtype, rows, cols, false));
  if (w->dtype == DataType::bfloat16) {
    // The quant_int8 kernels read float32 or float16: said, not dropped.
    if (skips != nullptr)
      skips->push_back({"", name,
                        "quant_int8 reads float32 or float16, not this bfloat16 " + std::string(node.op_type) +
                            " B (its transpose and to_f16 are planned)",
                        std::string(node.name)});
  } else if (stored_nk) {
    out.push_back(dense(Derivation::quant_int8, name, b.id, w->dtype, rows, cols, false));
  } else {
    out.push_back(dense(Derivation::quant_int8, name, b.id, w->dtype, cols, rows, true));
  }
  for (PlannedDerivation& p : out) {
    p.node = std::string(node.name);
    p.why = why;
    // A plan's launches are valid: a weight with a 0 dim has no elements
    // to bound its other dim, and [2^62, 0] float32 overflows the launch's
    // sizes, which derive would only find after building the rest.
    if (auto sizes = derivation_sizes(p.launch); !sizes.ok())
      return node_error(node, std::string(derivation_name(p.kind())) + " of " + why + ": " + sizes.error().message,
                        sizes.error().code);
  }
  return out;
}

Result<std::vector<PlannedDerivation>> plan_node(const Model& model, const NodeInfo& node, DensePlanned& planned_dense,
                                                 std::vector<PlanSkip>* skips) {
  if (node.op_type == "MatMulNBits" && node.domain == "com.microsoft") return plan_nbits(model, node, skips);
  if ((node.op_type == "MatMul" || node.op_type == "Gemm") && derive::onnx_domain(node.domain))
    return plan_dense(model, node, planned_dense, skips);
  return std::vector<PlannedDerivation>{};
}

// One skip per model-local function: its nodes are not read (not inlined),
// so the weights its calls pass it are not planned from it.
void function_skips(const Model& model, std::vector<PlanSkip>& skips) {
  if (model.functions().empty()) return;
  // Calls by (domain, op type): how many, and the first caller.
  std::map<std::pair<std::string_view, std::string_view>, std::pair<std::uint64_t, std::string_view>> called;
  for (const NodeInfo& n : model.nodes()) {
    ++called.try_emplace({n.domain, n.op_type}, 0, n.name).first->second.first;
  }
  for (const ModelFunction& f : model.functions()) {
    auto it = called.find({f.domain, f.name});
    const std::uint64_t calls = it == called.end() ? 0 : it->second.first;
    const std::string first = it == called.end() ? std::string() : std::string(it->second.second);
    const std::string id = (f.domain.empty() ? "" : f.domain + ".") + f.name;
    const std::string nodes = std::to_string(f.nodes) + " node" + (f.nodes == 1 ? "" : "s");
    skips.push_back(
        {"", "",
         "model-local function '" + id + "': its " + nodes + (f.nodes == 1 ? " is" : " are") +
             " not read (functions are not inlined), " +
             (calls == 0 ? std::string("and no node of the graph calls it")
                         : "so what its " + std::to_string(calls) + " call" + (calls == 1 ? "" : "s") + " (" +
                               std::to_string(f.nodes * calls) + " nodes in all) pass it is not planned from them"),
         first});
  }
}

// What makes two planned entries the same value: the kind, the operands by
// value id, and the launch's shape fields.
auto identity(const PlannedDerivation& p) {
  const DerivationLaunch& l = p.launch;
  return std::make_tuple(static_cast<int>(p.kind()), p.source.index, p.scales ? p.scales->index + 1 : 0,
                         p.zero_points ? p.zero_points->index + 1 : 0, p.of_transposed, l.rows, l.cols, l.block_size,
                         static_cast<int>(l.src_type), static_cast<int>(l.zero_points), l.src_cols, l.col_offset);
}

// Derived bytes against referenced source bytes (PlanOptions::max_amplification).
Status check_amplification(const Model& model, std::span<const PlannedDerivation> plan, double cap) {
  if (cap <= 0 || plan.empty()) return Status();
  const WeightStore& store = model.store();
  long double source = static_cast<long double>(store.referenced_weight_bytes().total);
  for (const auto& [id, w] : store.weights())
    if (!w.is_external()) source += static_cast<long double>(w.byte_length());
  long double derived = 0;
  for (const PlannedDerivation& p : plan) {
    DerivationLaunch l = p.launch;
    if (auto sizes = derivation_sizes(l); sizes.ok())
      derived += static_cast<long double>(sizes->dst_bytes) + static_cast<long double>(sizes->dst2_bytes);
  }
  return amplification::check("the plan's " + std::to_string(plan.size()) + " derivations would make " +
                                   std::to_string(static_cast<unsigned long long>(derived)) + " bytes",
                               derived, source, cap);
}

}  // namespace

Result<std::vector<PlannedDerivation>> plan_derivations(const Model& model, const PlanOptions& options) {
  const bool has_graph = !model.nodes().empty();
  const bool given = !options.rules.empty();
  const PlanSource source = options.source;
  // automatic: the graph when there is one; rules given are added to it;
  // a model without a graph is planned by its rules (the defaults if none).
  const bool use_graph = source == PlanSource::graph || source == PlanSource::graph_and_rules ||
                         (source == PlanSource::automatic && has_graph);
  const bool use_rules = source == PlanSource::rules || source == PlanSource::graph_and_rules ||
                         (source == PlanSource::automatic && (given || !has_graph));
  std::vector<PlannedDerivation> planned;
  // The graph's skips: listed when the caller collects skips, never an error.
  std::vector<PlanSkip> graph_skipped;
  if (use_graph) {
    DensePlanned planned_dense;
    for (const NodeInfo& node : model.nodes()) {
      BALLAST_ASSIGN_OR_RETURN(auto from_node, plan_node(model, node, planned_dense, &graph_skipped));
      for (PlannedDerivation& p : from_node) planned.push_back(std::move(p));
    }
    // A weight two nodes consume is one skip, under the first.
    std::set<std::pair<std::string, std::string>> seen_skips;
    std::erase_if(graph_skipped, [&](const PlanSkip& s) { return !seen_skips.emplace(s.weight, s.reason).second; });
    function_skips(model, graph_skipped);
  }
  if (options.skipped != nullptr)
    options.skipped->insert(options.skipped->end(), graph_skipped.begin(), graph_skipped.end());
  std::vector<PlanSkip> skipped;
  if (use_rules) {
    const std::vector<DerivationRule> defaults = given ? std::vector<DerivationRule>{} : default_derivation_rules();
    BALLAST_RETURN_IF_ERROR(derive::plan_rules(model, given ? options.rules : defaults, !given, planned, skipped),
                            "planning derivations");
  }
  if (!skipped.empty()) {
    if (options.skipped == nullptr) {
      const PlanSkip& s = skipped.front();
      Error e = make_error(ErrorCode::invalid_argument,
                           "rule '" + s.rule + "'" + (s.weight.empty() ? "" : " on weight '" + s.weight + "'") + ": " +
                               s.reason + (skipped.size() > 1 ? " (and " + std::to_string(skipped.size() - 1) + " more)" : "") +
                               "; PlanOptions::skipped lists them instead of failing");
      e.tensor = s.weight;
      return std::move(e).with_context("planning derivations");
    }
    options.skipped->insert(options.skipped->end(), skipped.begin(), skipped.end());
  }
  std::vector<PlannedDerivation> out;
  std::set<decltype(identity(PlannedDerivation{}))> seen;
  for (PlannedDerivation& p : planned)
    if (seen.insert(identity(p)).second) out.push_back(std::move(p));
  // The node records were read from the .onnx mapping: a truncation
  // meanwhile made them read zeros, and the plan is not the file's.
  BALLAST_RETURN_IF_ERROR(model.check_unchanged(), "planning derivations");
  BALLAST_RETURN_IF_ERROR(check_amplification(model, out, options.max_amplification), "planning derivations");
  return out;
}

Result<PlannedDerivation> plan_derivation(const Model& model, const NodeInfo& node, Derivation kind) {
  DensePlanned planned_dense;
  std::vector<PlanSkip> skips;
  BALLAST_ASSIGN_OR_RETURN(auto planned, plan_node(model, node, planned_dense, &skips));
  for (PlannedDerivation& p : planned)
    if (p.kind() == kind) return std::move(p);
  std::string why = std::string(derivation_name(kind)) + " does not apply to this node's weight";
  for (const PlanSkip& s : skips)
    if (s.reason.rfind(derivation_name(kind), 0) == 0) why += ": " + s.reason;
  return node_error(node, std::move(why));
}

namespace {

// dequant_gguf(_f32) of a weight as stored: rows are every dim but the
// innermost (GGUF's ne[0], the last of ours), which holds whole blocks.
template <class Fail>
Result<PlannedDerivation> plan_gguf(Derivation kind, std::string weight, ValueId id, const WeightRef& w, Fail& fail) {
  if (kinds::gguf_block(w.dtype) == nullptr)
    return fail(dtype_block(w.dtype) ? ErrorCode::unsupported : ErrorCode::invalid_argument,
                std::string(derivation_name(kind)) + " reads " + std::string(dtype_name(w.dtype)) +
                    (dtype_block(w.dtype) ? " blocks: not supported by derivations (docs/derivations.md lists the "
                                            "GGUF types they read)"
                                          : ": not a GGUF tensor type"));
  if (w.dims.empty()) return fail(ErrorCode::invalid_argument, "needs a weight of rank 1 or more");
  std::uint64_t rows = 1;
  for (std::size_t i = 0; i + 1 < w.dims.size(); ++i)
    if (__builtin_mul_overflow(rows, static_cast<std::uint64_t>(w.dims[i]), &rows))
      return fail(ErrorCode::overflow, "the weight's outer dims overflow 64 bits");
  PlannedDerivation p = dense(kind, std::move(weight), id, w.dtype, rows, static_cast<std::uint64_t>(w.dims[w.dims.size() - 1]), false);
  auto sizes = derivation_sizes(p.launch);
  if (!sizes) return fail(sizes.error().code, sizes.error().message);
  if (sizes->src_bytes != w.byte_length())
    return fail(ErrorCode::size_mismatch, "the weight holds " + std::to_string(w.byte_length()) + " bytes, " +
                                              std::to_string(rows) + " rows of " + std::to_string(p.launch.cols) +
                                              " " + std::string(dtype_name(w.dtype)) + " elements need " +
                                              std::to_string(sizes->src_bytes));
  p.why = std::string(dtype_name(w.dtype)) + " [" + std::to_string(rows) + ", " + std::to_string(p.launch.cols) +
          "] as stored";
  return p;
}

}  // namespace

Result<PlannedDerivation> plan_derivation(const Model& model, std::string_view weight, Derivation kind) {
  auto fail = [&](ErrorCode code, std::string why) {
    Error e = make_error(code, std::move(why));
    e.tensor = std::string(weight);
    return e.with_context("planning " + std::string(derivation_name(kind)) + " of weight '" + std::string(weight) + "'");
  };
  ValueId id;
  const WeightRef* w = derive::weight_named(model, weight, id);
  if (w == nullptr) return fail(ErrorCode::not_found, "the model has no weight of this name");
  if (derivation_kind(kind).gguf_blocks) return plan_gguf(kind, std::string(weight), id, *w, fail);
  if (kind == Derivation::slice)
    return fail(ErrorCode::invalid_argument,
                "slice gathers a rank's strided shard, whose columns come from a shard plan: gather_launch");
  if (w->dtype == DataType::q8_0 && kind == Derivation::quant_int8)
    return fail(ErrorCode::unsupported,
                "quant_int8 keeps one scale per row and q8_0 one per 32 elements, so its codes cannot be kept as "
                "stored; dequant_gguf_f32 gives the values to quantize");
  if (dtype_block(w->dtype))
    return fail(ErrorCode::invalid_argument, std::string(dtype_name(w->dtype)) +
                                                 " blocks are read by dequant_gguf or dequant_gguf_f32, not " +
                                                 std::string(derivation_name(kind)));
  if (w->dims.size() != 2 || (w->dtype != DataType::float32 && w->dtype != DataType::float16 &&
                              !(kind == Derivation::transpose && dtype_bits(w->dtype) >= 8) &&
                              !(kind == Derivation::to_f16 && w->dtype == DataType::bfloat16))) {
    // Said for the kind asked (a 1-D weight's transpose was told it needed
    // float32 or float16, which was not what it lacked).
    const char* needs = kind == Derivation::transpose ? "a 2-D weight of a whole-byte type"
                        : kind == Derivation::to_f16  ? "a 2-D float32 or bfloat16 weight"
                                                      : "a 2-D float32 or float16 weight";
    return fail(ErrorCode::invalid_argument, std::string(derivation_name(kind)) + " needs " + needs + "; this one is " +
                                                 std::to_string(w->dims.size()) + "-D " +
                                                 std::string(dtype_name(w->dtype)));
  }
  if (kind == Derivation::to_f16 && w->dtype != DataType::float32 && w->dtype != DataType::bfloat16)
    return fail(ErrorCode::invalid_argument, "to_f16 needs a float32 or bfloat16 weight");
  if (kind == Derivation::quant_int8_given_max)
    return fail(ErrorCode::invalid_argument,
                "quant_int8_given_max takes its rows' maxima from the ranks of a sharded derive; plan quant_int8");
  if (kind != Derivation::transpose && kind != Derivation::to_f16 && kind != Derivation::quant_int8)
    return fail(ErrorCode::invalid_argument, "int4 derivations are planned from their MatMulNBits node");
  PlannedDerivation p = dense(kind, std::string(weight), id, w->dtype, static_cast<std::uint64_t>(w->dims[0]),
                              static_cast<std::uint64_t>(w->dims[1]), false);
  p.why = "weight [" + std::to_string(w->dims[0]) + ", " + std::to_string(w->dims[1]) + "] as stored";
  // As the graph's entries: [2^62, 0] has no elements, yet no launch fits it.
  if (auto sizes = derivation_sizes(p.launch); !sizes.ok()) return fail(sizes.error().code, sizes.error().message);
  return p;
}

}  // namespace ballast
