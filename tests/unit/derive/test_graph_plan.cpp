// The planner on graphs as torch.onnx.export writes them (issue: planner
// gaps found with tools/gen/make_torch_model.py): a bfloat16 MatMul B, a B
// read through Transpose (no constant folding) or Identity (a shared
// module) nodes, and model-local functions, whose nodes are not read.
#include <ballast/derive.hpp>
#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include "unit/onnx/load_helpers.hpp"

#include <algorithm>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;

namespace {

// A [rows, cols] initializer of ONNX type `dtype` (1 float, 10 float16, 16 bfloat16).
Proto weight(std::string_view name, int dtype, std::int64_t rows, std::int64_t cols) {
  const std::size_t width = dtype == 1 ? 4 : 2;
  Proto t = tensor(name, dtype, {rows, cols});
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(rows * cols) * width);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7 + 3);
  raw_data(t, bytes);
  return t;
}

Model load(const Proto& bytes) {
  auto m = load_proto(bytes);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  return std::move(*m);
}

const PlannedDerivation* find(const std::vector<PlannedDerivation>& plan, std::string_view weight, Derivation kind) {
  auto it = std::find_if(plan.begin(), plan.end(),
                         [&](const PlannedDerivation& p) { return p.weight == weight && p.kind() == kind; });
  return it == plan.end() ? nullptr : &*it;
}

std::vector<Derivation> kinds_of(const std::vector<PlannedDerivation>& plan, std::string_view weight) {
  std::vector<Derivation> out;
  for (const PlannedDerivation& p : plan)
    if (p.weight == weight) out.push_back(p.kind());
  return out;
}

const NodeInfo& node_named(const Model& m, std::string_view name) {
  for (const NodeInfo& n : m.nodes())
    if (n.name == name) return n;
  FAIL("no node " << name);
  return m.nodes().front();
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a bfloat16 MatMul or Gemm B: transpose and to_f16 planned, quant_int8 a listed skip naming the node") {
  static const Proto bytes = model(graph({named_node("mm", "MatMul", {"X", "Wk"}, {"Y"}),
                                          named_node("gemm", "Gemm", {"Y", "Wn"}, {"Z"}, {attribute_int("transB", 1)}),
                                          named_node("mm_again", "MatMul", {"X2", "Wk"}, {"Y2"})},
                                         {weight("Wk", 16, 8, 4), weight("Wn", 16, 6, 4)}));
  const Model m = load(bytes);
  std::vector<PlanSkip> skipped;
  PlanOptions o;
  o.skipped = &skipped;
  auto plan = plan_derivations(m, o);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  for (std::string_view w : {"Wk", "Wn"})
    CHECK(kinds_of(*plan, w) == std::vector<Derivation>{Derivation::transpose, Derivation::to_f16});
  const PlannedDerivation* t = find(*plan, "Wk", Derivation::to_f16);
  REQUIRE(t != nullptr);
  CHECK(t->launch.src_type == DataType::bfloat16);
  CHECK(t->node == "mm");
  CHECK(t->why == "MatMul B [K, N] = [8, 4]");
  CHECK(find(*plan, "Wn", Derivation::transpose)->why == "Gemm B [N, K] = [6, 4]");
  // One skip per weight (Wk's second consumer adds none), under its first consumer.
  REQUIRE(skipped.size() == 2);
  CHECK(skipped[0].rule.empty());
  CHECK(skipped[0].node == "mm");
  CHECK(skipped[0].weight == "Wk");
  CHECK_MESSAGE(contains(skipped[0].reason, "quant_int8 reads float32 or float16"), skipped[0].reason);
  CHECK(skipped[1].node == "gemm");
  CHECK(skipped[1].weight == "Wn");
  // Not collected: the graph's skips are not errors (the model is valid).
  auto quiet = plan_derivations(m);
  REQUIRE_MESSAGE(quiet.ok(), quiet.error().to_string());
  CHECK(quiet->size() == plan->size());
  // One node at a time: what applies is planned, quant_int8 refused with the reason.
  CHECK(plan_derivation(m, node_named(m, "mm_again"), Derivation::to_f16).ok());
  auto q = plan_derivation(m, node_named(m, "gemm"), Derivation::quant_int8);
  REQUIRE_FALSE(q.ok());
  CHECK_MESSAGE(contains(q.error().message, "quant_int8 reads float32 or float16"), q.error().to_string());
}
