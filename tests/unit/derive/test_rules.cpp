// Derivation rules (issue 26, "Derivations without a graph"): name patterns,
// the built-in Hugging Face rules on a safetensors checkpoint, the sources a
// plan may come from, and skips that are listed or errors, never dropped.
#include "unit/derive/plan_queries.hpp"
#include <ballast/derive.hpp>
#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include "derive/name_pattern.hpp"
#include "unit/onnx/load_helpers.hpp"
#include "unit/safetensors/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <algorithm>

using namespace ballast;
using namespace ballast::testing;

namespace {

using ballast::testing::count;

std::vector<std::uint8_t> zeros(std::size_t n) { return std::vector<std::uint8_t>(n, 0); }

// A decoder checkpoint in Hugging Face names: f32 attention, f16 mlp, a
// bf16 norm, an lm_head, and a GPTQ triple.
Model decoder(const ScratchDir& dir, bool with_head = true, bool gptq = false) {
  std::vector<StTensor> t = {
      {"model.embed_tokens.weight", "F32", {16, 8}, zeros(16 * 8 * 4)},
      {"model.layers.0.self_attn.q_proj.weight", "F32", {8, 8}, zeros(8 * 8 * 4)},
      {"model.layers.0.self_attn.o_proj.weight", "F32", {8, 8}, zeros(8 * 8 * 4)},
      {"model.layers.0.mlp.down_proj.weight", "F16", {8, 4}, zeros(8 * 4 * 2)},
      {"model.layers.0.input_layernorm.weight", "BF16", {8}, zeros(16)},
  };
  if (with_head) t.push_back({"lm_head.weight", "F32", {16, 8}, zeros(16 * 8 * 4)});
  if (gptq) {
    t.push_back({"model.layers.0.mlp.up_proj.qweight", "I32", {1, 8}, zeros(32)});
    t.push_back({"model.layers.0.mlp.up_proj.scales", "F16", {1, 8}, zeros(16)});
  }
  auto m = open_model(dir.write("model.safetensors", st_file(t)));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  return std::move(*m);
}

}  // namespace

TEST_CASE("name patterns: *, ?, {a,b}; whole names only; bad patterns refused") {
  using derive::NamePattern;
  auto p = NamePattern::compile("model.layers.*.self_attn.{q,k,v,o}_proj.weight");
  REQUIRE(p.ok());
  CHECK(p->matches("model.layers.0.self_attn.q_proj.weight"));
  CHECK(p->matches("model.layers.31.self_attn.o_proj.weight"));
  CHECK_FALSE(p->matches("model.layers.0.self_attn.x_proj.weight"));
  CHECK_FALSE(p->matches("model.layers.0.self_attn.q_proj.weight.extra"));
  CHECK_FALSE(p->matches("xmodel.layers.0.self_attn.q_proj.weight"));
  auto q = NamePattern::compile("a?c*");
  REQUIRE(q.ok());
  CHECK(q->matches("abc"));
  CHECK(q->matches("abcdef"));
  CHECK_FALSE(q->matches("ac"));
  auto star = NamePattern::compile("*a*a*a*a*a*b");
  REQUIRE(star.ok());
  CHECK_FALSE(star->matches(std::string(5000, 'a')));  // no exponential backtracking
  CHECK(NamePattern::compile("").error().code == ErrorCode::invalid_argument);
  CHECK(NamePattern::compile("{a,b").error().code == ErrorCode::invalid_argument);
  CHECK(NamePattern::compile("a}").error().code == ErrorCode::invalid_argument);
  CHECK(NamePattern::compile("{a,{b}}").error().code == ErrorCode::invalid_argument);
  CHECK(NamePattern::compile("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}{m,n}{o,p}{q,r}").error().code == ErrorCode::invalid_argument);
}

TEST_CASE("a checkpoint without a graph is planned by the Hugging Face rules, each derivation naming its rule") {
  ScratchDir dir("rules-default");
  Model m = decoder(dir);
  auto plan = plan_derivations(m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  CHECK(count(*plan, "model.layers.0.self_attn.q_proj.weight", Derivation::transpose) == 1);
  CHECK(count(*plan, "model.layers.0.self_attn.q_proj.weight", Derivation::to_f16) == 1);
  CHECK(count(*plan, "model.layers.0.mlp.down_proj.weight", Derivation::transpose) == 1);
  CHECK(count(*plan, "model.layers.0.mlp.down_proj.weight", Derivation::to_f16) == 0);  // already float16
  CHECK(count(*plan, "lm_head.weight", Derivation::quant_int8) == 1);
  CHECK(count(*plan, "model.embed_tokens.weight", Derivation::quant_int8) == 0);  // not tied: there is a head
  CHECK(count(*plan, "model.layers.0.input_layernorm.weight", Derivation::transpose) == 0);
  CHECK(plan->size() == 6);
  for (const PlannedDerivation& p : *plan) CHECK(p.why.rfind("rule hf-", 0) == 0);
  // quant_int8 of a [N, K] Linear weight is per stored row: per output channel.
  const auto head = std::find_if(plan->begin(), plan->end(), [](const PlannedDerivation& p) { return p.weight == "lm_head.weight"; });
  CHECK(head->launch.rows == 16);
  CHECK(head->launch.cols == 8);
  CHECK_FALSE(head->of_transposed);
}

TEST_CASE("a tied head: the embedding is quantized when there is no lm_head") {
  ScratchDir dir("rules-tied");
  Model m = decoder(dir, /*with_head=*/false);
  auto plan = plan_derivations(m);
  REQUIRE(plan.ok());
  CHECK(count(*plan, "model.embed_tokens.weight", Derivation::quant_int8) == 1);
}

// quant_int8 reads float32 and float16 only: a bfloat16 checkpoint's head
// (the usual Hugging Face type) gets to_f16 as its layers do, never nothing.
TEST_CASE("a bfloat16 head, its own or tied, gets to_f16") {
  for (const bool with_head : {true, false}) {
    CAPTURE(with_head);
    ScratchDir dir(with_head ? "rules-bf16-head" : "rules-bf16-tied");
    std::vector<StTensor> t = {{"model.embed_tokens.weight", "BF16", {16, 8}, zeros(16 * 8 * 2)},
                               {"model.layers.0.self_attn.q_proj.weight", "BF16", {8, 8}, zeros(8 * 8 * 2)}};
    if (with_head) t.push_back({"lm_head.weight", "BF16", {16, 8}, zeros(16 * 8 * 2)});
    auto m = open_model(dir.write("model.safetensors", st_file(t)));
    REQUIRE_MESSAGE(m.ok(), m.error().to_string());
    auto plan = plan_derivations(*m);
    REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
    const std::string head = with_head ? "lm_head.weight" : "model.embed_tokens.weight";
    CHECK(count(*plan, head, Derivation::to_f16) == 1);
    CHECK(count(*plan, head, Derivation::quant_int8) == 0);
    // The embedding of a model with a head is its own (a gather reads it as stored).
    if (with_head) CHECK(count(*plan, "model.embed_tokens.weight", Derivation::to_f16) == 0);
    const auto it =
        std::find_if(plan->begin(), plan->end(), [&](const PlannedDerivation& p) { return p.weight == head; });
    REQUIRE(it != plan->end());
    CHECK(it->why.rfind(with_head ? "rule hf-lm-head-f16 " : "rule hf-tied-head-f16 ", 0) == 0);
  }
}

TEST_CASE("a GPTQ weight is a listed skip with the reason, or an error when nobody listens") {
  ScratchDir dir("rules-gptq");
  Model m = decoder(dir, true, /*gptq=*/true);
  auto refused = plan_derivations(m);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK(refused.error().tensor == "model.layers.0.mlp.up_proj.qweight");
  CHECK(refused.error().message.find("GPTQ") != std::string::npos);
  std::vector<PlanSkip> skipped;
  PlanOptions o;
  o.skipped = &skipped;
  auto plan = plan_derivations(m, o);
  REQUIRE(plan.ok());
  CHECK(plan->size() == 6);
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].rule == "packed-int4");
  CHECK(skipped[0].weight == "model.layers.0.mlp.up_proj.qweight");
}

TEST_CASE("given rules: a weight a derivation cannot take, a rule that matches nothing, bad rules") {
  ScratchDir dir("rules-given");
  Model m = decoder(dir);
  std::vector<PlanSkip> skipped;
  PlanOptions o;
  o.skipped = &skipped;
  o.rules = {{"norms", "*.input_layernorm.weight", {Derivation::transpose}, {}, "", ""},
             {"nothing", "*.does_not_exist", {Derivation::to_f16}, {}, "", ""},
             {"heads", "lm_head.weight", {Derivation::to_f16, Derivation::quant_int8}, {}, "", ""}};
  auto plan = plan_derivations(m, o);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  // Given rules replace the defaults: only the head's two.
  CHECK(plan->size() == 2);
  CHECK(count(*plan, "lm_head.weight", Derivation::to_f16) == 1);
  REQUIRE(skipped.size() == 2);
  CHECK(skipped[0].rule == "norms");  // 1-D: transpose needs 2-D
  CHECK(skipped[0].weight == "model.layers.0.input_layernorm.weight");
  CHECK(skipped[1].rule == "nothing");
  CHECK(skipped[1].weight.empty());
  CHECK(skipped[1].reason.find("matches no weight") != std::string::npos);

  PlanOptions bad;
  bad.rules = {{"int4", "*", {Derivation::dequant_int4}, {}, "", ""}};
  auto refused = plan_derivations(m, bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("needs scales") != std::string::npos);
  bad.rules = {{"broken", "{a", {Derivation::transpose}, {}, "", ""}};
  CHECK(plan_derivations(m, bad).error().code == ErrorCode::invalid_argument);
}

TEST_CASE("ONNX with rules: on top of the graph's plan, or instead of it") {
  using namespace onnx_proto;
  std::vector<std::uint8_t> w_bytes(8 * 16 * 4, 0);
  Proto w = tensor("W", 1, {8, 16});
  raw_data(w, w_bytes);
  Proto e = tensor("embed", 1, {4, 8});
  raw_data(e, std::vector<std::uint8_t>(4 * 8 * 4, 0));
  static const Proto bytes = onnx_proto::model(graph({node("MatMul", {"X", "W"}, {"Y"})}, {w, e}));
  auto m = load_proto(bytes);
  REQUIRE(m.ok());
  auto graph_plan = plan_derivations(*m);
  REQUIRE(graph_plan.ok());
  CHECK(graph_plan->size() == 3);  // transpose, to_f16, quant_int8 of W
  PlanOptions o;
  o.rules = {{"embed", "embed", {Derivation::quant_int8}, {}, "", ""}};
  auto both = plan_derivations(*m, o);  // automatic: rules given are added to the graph's plan
  REQUIRE(both.ok());
  CHECK(both->size() == 4);
  CHECK(count(*both, "embed", Derivation::quant_int8) == 1);
  o.source = PlanSource::rules;
  auto rules_only = plan_derivations(*m, o);
  REQUIRE(rules_only.ok());
  CHECK(rules_only->size() == 1);
  o.source = PlanSource::graph;
  CHECK(plan_derivations(*m, o)->size() == 3);
  // The same derivation from the graph and a rule is planned once.
  o.source = PlanSource::graph_and_rules;
  o.rules = {{"w", "W", {Derivation::transpose}, {}, "", ""}};
  CHECK(plan_derivations(*m, o)->size() == 3);
}

// bfloat16 is a Hugging Face checkpoint's usual type, and to_f16 reads it:
// the built-in rules plan it beside the transpose; quant_int8 does not read
// it, so a rule asking for that lists a skip.
TEST_CASE("a bfloat16 checkpoint: transpose and to_f16 of its layers, by the built-in rules and by name") {
  ScratchDir dir("derive-rules-bf16");
  std::vector<std::uint8_t> bf16(8 * 4 * 2);
  for (std::size_t i = 0; i < bf16.size(); i += 2) bf16[i + 1] = 0x3f;  // 0x3f00: 0.5
  const std::vector<StTensor> t = {{"model.layers.0.self_attn.q_proj.weight", "BF16", {8, 4}, bf16},
                                   {"model.layers.0.mlp.up_proj.weight", "BF16", {8, 4}, bf16}};
  auto m = open_model(dir.write("model.safetensors", st_file(t)));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  std::vector<PlanSkip> skipped;
  PlanOptions o;
  o.skipped = &skipped;
  auto plan = plan_derivations(*m, o);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  CHECK(skipped.empty());
  for (const char* w : {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight"}) {
    CAPTURE(w);
    CHECK(count(*plan, w, Derivation::transpose) == 1);
    REQUIRE(count(*plan, w, Derivation::to_f16) == 1);
  }
  const auto f16 = std::find_if(plan->begin(), plan->end(),
                                [](const PlannedDerivation& p) { return p.launch.kind == Derivation::to_f16; });
  CHECK(f16->launch.src_type == DataType::bfloat16);
  CHECK(f16->launch.rows * f16->launch.cols == 32);

  auto by_name = plan_derivation(*m, "model.layers.0.mlp.up_proj.weight", Derivation::to_f16);
  REQUIRE_MESSAGE(by_name.ok(), by_name.error().to_string());
  CHECK(by_name->launch.src_type == DataType::bfloat16);
  auto int8 = plan_derivation(*m, "model.layers.0.mlp.up_proj.weight", Derivation::quant_int8);
  REQUIRE_FALSE(int8.ok());
  CHECK(int8.error().message.find("quant_int8 needs a 2-D float32 or float16 weight; this one is 2-D bfloat16") !=
        std::string::npos);
  // Said for the kind asked: a 1-D weight's transpose lacks a dimension, not a type.
  const std::vector<StTensor> norm = {
      {"model.norm.weight", "BF16", {8}, std::vector<std::uint8_t>(bf16.begin(), bf16.begin() + 16)}};
  auto n = open_model(dir.write("norm.safetensors", st_file(norm)));
  REQUIRE_MESSAGE(n.ok(), n.error().to_string());
  auto bias = plan_derivation(*n, "model.norm.weight", Derivation::transpose);
  REQUIRE_FALSE(bias.ok());
  CHECK(bias.error().message.find("transpose needs a 2-D weight of a whole-byte type; this one is 1-D") !=
        std::string::npos);
}
