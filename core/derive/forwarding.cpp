// forwarded_weight and weight_named (forwarding.hpp).
#include "derive/forwarding.hpp"

namespace ballast::derive {

namespace {

// Bounds the walk: a chain longer than any exporter writes, or a cycle,
// reads as computed at run time.
constexpr int kMaxForwarding = 16;

}  // namespace

const WeightRef* weight_named(const Model& model, std::string_view name, ValueId& id) {
  auto v = model.value_id(name);
  if (!v) return nullptr;
  auto it = model.store().weights().find(*v);
  if (it == model.store().weights().end()) return nullptr;
  id = *v;
  return &it->second;
}

Operand forwarded_weight(const Model& model, std::string_view value) {
  Operand out;
  std::string_view name = value;
  for (int step = 0;; ++step) {
    if (const WeightRef* w = weight_named(model, name, out.id)) {
      out.w = w;
      out.name = name;
      return out;
    }
    if (step == kMaxForwarding || name.empty()) return {};
    const NodeInfo* p = model.producer(name);
    if (p == nullptr || p->inputs.empty() || !onnx_domain(p->domain)) return {};
    if (p->op_type == "Transpose") {
      // perm absent reverses the axes: [1, 0] for a 2-D weight (the
      // callers check the rank); [0, 1] moves nothing.
      const auto perm = p->ints_attribute("perm");
      const bool swap = !perm || (perm->size() == 2 && (*perm)[0] == 1 && (*perm)[1] == 0);
      const bool keep = perm && perm->size() == 2 && (*perm)[0] == 0 && (*perm)[1] == 1;
      if (!swap && !keep) return {};
      out.transposed ^= swap;
    } else if (p->op_type != "Identity") {
      return {};
    }
    out.via.push_back(p);
    name = p->inputs[0];
  }
}

std::string via_text(const Operand& operand) {
  std::string out;
  for (const NodeInfo* n : operand.via)
    out += (out.empty() ? "" : ", ") + std::string(n->op_type) + " '" + std::string(n->name) + "'";
  return out;
}

}  // namespace ballast::derive
