#include "support_derive_plan.hpp"

#include <set>
#include <utility>

namespace ballast::cli {
namespace {

const WeightRef* weight_of(const Model& model, std::string_view name, ValueId& id) {
  auto v = model.value_id(name);
  if (!v) return nullptr;
  auto it = model.store().weights.find(*v);
  if (it == model.store().weights.end()) return nullptr;
  id = *v;
  return &it->second;
}

Error node_error(const NodeInfo& node, std::string why) {
  Error e = make_error(ErrorCode::invalid_argument, std::move(why));
  e.tensor = std::string(node.name.empty() ? node.op_type : node.name);
  return e.with_context("planning derivations for " + std::string(node.op_type) + " node '" + std::string(node.name) +
                        "'");
}

std::optional<std::int64_t> attr(const NodeInfo& node, const char* name) { return node.int_attribute(name); }

Status plan_nbits(const Model& model, const NodeInfo& node, std::set<std::pair<int, std::uint32_t>>& seen,
                  std::vector<PlannedDerivation>& out) {
  if (attr(node, "bits").value_or(4) != 4) return Status();  // only 4-bit layouts are derived
  if (node.inputs.size() < 3) return node_error(node, "MatMulNBits needs inputs A, B and scales");
  ValueId b_id, s_id, zp_id;
  const WeightRef* b = weight_of(model, node.inputs[1], b_id);
  const WeightRef* s = weight_of(model, node.inputs[2], s_id);
  if (b == nullptr || s == nullptr) return Status();  // computed at run time: nothing to derive ahead
  const WeightRef* zp = nullptr;
  if (node.inputs.size() > 3 && !node.inputs[3].empty()) {
    zp = weight_of(model, node.inputs[3], zp_id);
    if (zp == nullptr) return Status();
  }
  auto k = attr(node, "K"), n = attr(node, "N"), bs = attr(node, "block_size");
  if (!k || !n || !bs || *k <= 0 || *n <= 0 || *bs <= 0)
    return node_error(node, "MatMulNBits needs positive K, N and block_size attributes");
  DerivationLaunch l;
  l.src_type = s->dtype;
  l.rows = static_cast<std::uint64_t>(*n);
  l.cols = static_cast<std::uint64_t>(*k);
  l.block_size = static_cast<std::uint32_t>(*bs);
  l.zero_points = ZeroPoints::absent;
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
    if (!seen.insert({static_cast<int>(kind), b_id.index}).second) continue;
    PlannedDerivation p;
    p.kind = kind;
    p.weight = std::string(node.inputs[1]);
    p.source = b_id;
    p.scales = s_id;
    if (zp != nullptr) p.zero_points = zp_id;
    p.launch = l;
    out.push_back(std::move(p));
  }
  return Status();
}

Status plan_dense(const Model& model, const NodeInfo& node, std::set<std::pair<int, std::uint32_t>>& seen,
                  std::vector<PlannedDerivation>& out) {
  if (node.inputs.size() < 2) return Status();
  ValueId id;
  const WeightRef* w = weight_of(model, node.inputs[1], id);
  if (w == nullptr || w->dims.size() != 2) return Status();
  if (w->dtype != DataType::float32 && w->dtype != DataType::float16) return Status();
  const auto rows = static_cast<std::uint64_t>(w->dims[0]);
  const auto cols = static_cast<std::uint64_t>(w->dims[1]);
  // MatMul B and Gemm B without transB are [K, N]; with transB they are [N, K].
  const bool stored_nk = node.op_type == "Gemm" && attr(node, "transB").value_or(0) != 0;

  auto add = [&](Derivation kind, DataType type, std::uint64_t r, std::uint64_t c, bool of_transposed) {
    if (!seen.insert({static_cast<int>(kind), id.index}).second) return;
    PlannedDerivation p;
    p.kind = kind;
    p.weight = std::string(node.inputs[1]);
    p.source = id;
    p.of_transposed = of_transposed;
    p.launch.kind = kind;
    p.launch.src_type = type;
    p.launch.rows = r;
    p.launch.cols = c;
    out.push_back(std::move(p));
  };
  add(Derivation::transpose, w->dtype, rows, cols, false);
  if (w->dtype == DataType::float32) add(Derivation::to_f16, w->dtype, rows, cols, false);
  if (stored_nk) add(Derivation::quant_int8, w->dtype, rows, cols, false);
  else add(Derivation::quant_int8, w->dtype, cols, rows, true);
  return Status();
}

}  // namespace

Result<std::vector<PlannedDerivation>> plan_derivations(const Model& model) {
  std::vector<PlannedDerivation> out;
  std::set<std::pair<int, std::uint32_t>> seen;
  for (const NodeInfo& node : model.nodes()) {
    Status s;
    if (node.op_type == "MatMulNBits" && node.domain == "com.microsoft") s = plan_nbits(model, node, seen, out);
    else if ((node.op_type == "MatMul" || node.op_type == "Gemm") && node.domain.empty()) s = plan_dense(model, node, seen, out);
    if (!s.ok()) return s.error();
  }
  return out;
}

}  // namespace ballast::cli
