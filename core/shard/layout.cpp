// Layouts from consuming nodes and format conventions (layout.hpp).
#include "shard/layout.hpp"

#include "derive/forwarding.hpp"

namespace ballast::shard {

namespace {

// A weight whose layout no node tells: a Linear's [..., out, in], which is
// what safetensors (Hugging Face) and GGUF (ne[0] = in, innermost) store.
Layout convention(const Model& model, const WeightRef& w) {
  Layout l;
  const int rank = static_cast<int>(w.dims.size());
  l.out_axis = rank >= 2 ? rank - 2 : 0;
  l.in_axis = rank >= 2 ? rank - 1 : -1;
  switch (model.format()) {
    case ModelFormat::gguf: l.text = "GGUF [out, in] (ne[0] = in, innermost)"; break;
    case ModelFormat::safetensors:
    case ModelFormat::safetensors_index: l.text = "safetensors [out, in] (a Linear's weight)"; break;
    case ModelFormat::onnx: l.text = "[out, in] assumed (no MatMul, Gemm, Gather or MatMulNBits reads it)"; break;
  }
  if (rank == 1) l.text = "[out] (1-D)";
  return l;
}

}  // namespace

Consumers::Consumers(const Model& model) : model_(model) {
  for (const NodeInfo& node : model.nodes()) {
    auto id_of = [&](std::size_t i) -> std::optional<ValueId> {
      if (i >= node.inputs.size() || node.inputs[i].empty()) return std::nullopt;
      auto id = model.value_id(node.inputs[i]);
      if (!id || model.store().weights().count(*id) == 0) return std::nullopt;
      return id;
    };
    const std::string of = " of node " + in_quotes(node.name);
    if (node.op_type == "MatMulNBits" && node.domain == "com.microsoft") {
      auto b = id_of(1);
      if (!b) continue;
      NbitsShape s;
      const auto k = node.int_attribute("K"), n = node.int_attribute("N"), bs = node.int_attribute("block_size");
      // Checked where the split is planned (a malformed node is an error
      // only for a weight that is split).
      s.k = k && *k > 0 ? static_cast<std::uint64_t>(*k) : 0;
      s.n = n && *n > 0 ? static_cast<std::uint64_t>(*n) : 0;
      s.block_size = bs && *bs > 0 ? static_cast<std::uint64_t>(*bs) : 0;
      s.k_blocks = s.block_size == 0 ? 0 : (s.k + s.block_size - 1) / s.block_size;
      s.bits = node.int_attribute("bits").value_or(4);
      s.node = std::string(node.name);
      s.b = *b;
      Layout lb;
      lb.role = Role::nbits_b;
      lb.nbits = s;
      lb.text = "MatMulNBits B [N, k_blocks, blob] of node " + in_quotes(node.name);
      note(*b, lb);
      const std::string follows = " of node " + in_quotes(node.name) + " (follows B " + in_quotes(node.inputs[1]) + ")";
      if (auto sc = id_of(2)) {
        Layout l = lb;
        l.role = Role::nbits_scales;
        l.text = "MatMulNBits scales [N, k_blocks]" + follows;
        note(*sc, l);
      }
      if (auto zp = id_of(3)) {
        Layout l = lb;
        l.role = Role::nbits_zero_points;
        l.text = "MatMulNBits zero points [N, k_blocks]" + follows;
        note(*zp, l);
      }
      continue;
    }
    if (!derive::onnx_domain(node.domain)) continue;
    if (node.op_type == "MatMul" || node.op_type == "Gemm") {
      const bool trans_b = node.op_type == "Gemm" && node.int_attribute("transB").value_or(0) != 0;
      // MatMul broadcasts a B of rank > 2 as a stack of [K, N] matrices; a
      // 1-D B has no output axis and keeps the format's convention. B may
      // be read through Identity and 2-D Transpose nodes (torch's exports
      // of shared modules, and without constant folding): the weight behind
      // them, a Transpose swapping its axes, as the planner sees it.
      const derive::Operand b =
          node.inputs.size() > 1 ? derive::forwarded_weight(model, node.inputs[1]) : derive::Operand{};
      const int rank = b.w != nullptr ? static_cast<int>(b.w->dims.size()) : 0;
      if (b.w != nullptr && rank >= 2 && (!b.transposed || rank == 2)) {
        const bool stored_nk = trans_b != b.transposed;
        Layout l;
        l.out_axis = stored_nk ? rank - 2 : rank - 1;
        l.in_axis = stored_nk ? rank - 1 : rank - 2;
        l.text = std::string(node.op_type) + (stored_nk ? " B [N, K]" : " B [K, N]") + (trans_b ? " (transB)" : "") +
                 (b.via.empty() ? "" : " through " + derive::via_text(b)) + of;
        note(b.id, l);
      }
      if (auto c = id_of(2); c && node.op_type == "Gemm") {
        Layout l;
        l.out_axis = 0;
        l.text = "Gemm C [N]" + of;
        note(*c, l);
      }
    } else if (node.op_type == "Gather") {
      if (auto data = id_of(0)) {
        Layout l;
        l.out_axis = static_cast<int>(node.int_attribute("axis").value_or(0));
        l.in_axis = -1;
        l.text = "Gather data [vocab, hidden] (rows looked up on axis " + std::to_string(l.out_axis) + ")" + of;
        note(*data, l);
      }
    }
  }
}

void Consumers::note(ValueId id, Layout layout) {
  auto [it, inserted] = by_weight_.emplace(id, layout);
  if (inserted) return;
  Layout& have = it->second;
  // A Gather's data has no input axis (-1): a tied embedding the head
  // reads as MatMul(x, Transpose(W)) agrees with it on the output axis,
  // which is all a Gather says.
  const bool same_in = have.in_axis == layout.in_axis || have.in_axis == -1 || layout.in_axis == -1;
  const bool same =
      have.role == layout.role && have.out_axis == layout.out_axis && same_in &&
      (!have.nbits || (layout.nbits && have.nbits->k == layout.nbits->k && have.nbits->n == layout.nbits->n &&
                       have.nbits->block_size == layout.nbits->block_size));
  if (!same && have.conflict.empty()) have.conflict = have.text + ", and " + layout.text;
}

Layout Consumers::layout_of(ValueId id, const WeightRef& w) const {
  // Axes past the weight's rank (a MatMul B that is not 2-D, a Gather's
  // axis out of range) are refused where the split is planned (resolve.cpp).
  if (auto it = by_weight_.find(id); it != by_weight_.end()) return it->second;
  return convention(model_, w);
}

}  // namespace ballast::shard
