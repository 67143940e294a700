// The weight a node's input reads, seen through the nodes exporters put
// between them: Identity (torch writes Identity(W) for a shared module's
// weight) and 2-D Transpose (MatMul(x, Transpose(W)) without constant
// folding). The planner and the shard layouts both ask it, so a MatMul B
// read through a Transpose is the same weight, in the same layout, to both.
#pragma once

#include <ballast/model.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace ballast::derive {

// The ONNX operators' domain, which a node may spell "" or "ai.onnx" (both
// run alike); every reader of op types asks this, so no node of the one
// spelling is read and one of the other skipped.
inline bool onnx_domain(std::string_view domain) noexcept { return domain.empty() || domain == "ai.onnx"; }

struct Operand {
  const WeightRef* w = nullptr;  // nullptr: computed at run time (or past the walk's bound)
  ValueId id{};
  std::string_view name;             // the weight's name, the model's own string
  bool transposed = false;           // an odd number of swapping transposes on the way
  std::vector<const NodeInfo*> via;  // the forwarding nodes, from the consumer up; empty: read directly
};

// `value` itself when it is a weight; else the weight behind a chain of at
// most 16 Identity and 2-D Transpose nodes (perm [1, 0], [0, 1] or absent)
// of the ONNX domain. A longer chain, a cycle, or any other producer:
// w == nullptr. Linear in the chain (Model::producer is indexed once).
Operand forwarded_weight(const Model& model, std::string_view value);

// The weight named `name` (its id in `id`), or nullptr when the value is
// computed at run time or not in the model.
const WeightRef* weight_named(const Model& model, std::string_view name, ValueId& id);

// "Transpose 'a', Identity 'b'": the nodes a weight was read through.
std::string via_text(const Operand& operand);

}  // namespace ballast::derive
