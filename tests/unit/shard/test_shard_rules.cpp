// Shard rules: the defaults on Hugging Face, GGUF and the llm test model's
// names; overrides (in code and from a rules file); the refusals.
#include "unit/shard/models.hpp"

#include "support/shard_rules_file.hpp"

using namespace ballast;
using namespace ballast::testing;

namespace {

Result<Model> hf_model(const ScratchDir& dir) { return open_model(dir.write("m.safetensors", st_file(hf_tensors()))); }

std::string split_of(const ShardPlan& plan, std::string_view weight) {
  return std::string(shard_split_name(shard_of(plan, weight).split));
}

}  // namespace

TEST_CASE("default rules: Hugging Face names") {
  ScratchDir dir("shard-rules-hf");
  auto m = hf_model(dir);
  REQUIRE(m.ok());
  auto plan = plan_shards(*m, ShardSpec{2, 1, {}});
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  const std::string l = "model.layers.0.";
  for (std::string p : {"q", "k", "v"}) CHECK(split_of(*plan, l + "self_attn." + p + "_proj.weight") == "column");
  CHECK(split_of(*plan, l + "self_attn.q_proj.bias") == "column");
  CHECK(split_of(*plan, l + "self_attn.o_proj.weight") == "row");
  CHECK(split_of(*plan, l + "self_attn.o_proj.bias") == "replicated");
  CHECK(split_of(*plan, l + "mlp.gate_up_proj.weight") == "column");
  CHECK(shard_of(*plan, l + "mlp.gate_up_proj.weight").parts == 2);
  CHECK(split_of(*plan, l + "mlp.down_proj.weight") == "row");
  CHECK(split_of(*plan, l + "input_layernorm.weight") == "replicated");
  CHECK(shard_of(*plan, l + "input_layernorm.weight").rule == "norms");
  CHECK(split_of(*plan, "model.embed_tokens.weight") == "vocab");
  CHECK(split_of(*plan, "lm_head.weight") == "vocab");
  // A merged QKV has no default (its parts depend on the head counts):
  // no rule matches, so it is whole on every rank.
  CHECK(split_of(*plan, l + "self_attn.qkv_proj.weight") == "replicated");
  CHECK(shard_of(*plan, l + "self_attn.qkv_proj.weight").rule.empty());
}

TEST_CASE("default rules: GGUF llama names and the llm test model's ONNX names") {
  ScratchDir dir("shard-rules-gguf");
  auto g = open_model(dir.write("m.gguf", gguf_of(gguf_llama())));
  REQUIRE(g.ok());
  auto gp = plan_shards(*g, ShardSpec{2, 0, {}});
  REQUIRE_MESSAGE(gp.ok(), gp.error().to_string());
  CHECK(split_of(*gp, "token_embd.weight") == "vocab");
  CHECK(split_of(*gp, "output.weight") == "vocab");
  CHECK(split_of(*gp, "blk.0.attn_q.weight") == "column");
  CHECK(split_of(*gp, "blk.0.attn_output.weight") == "row");
  CHECK(split_of(*gp, "blk.0.ffn_down.weight") == "row");
  CHECK(split_of(*gp, "blk.0.attn_norm.weight") == "replicated");
  CHECK(shard_of(*gp, "blk.0.attn_q.weight").rule == "gguf-column");

  ScratchDir dir2("shard-rules-llm");
  auto o = llm_onnx().write(dir2);
  REQUIRE(o.ok());
  auto op = plan_shards(*o, ShardSpec{2, 0, {}});
  REQUIRE_MESSAGE(op.ok(), op.error().to_string());
  for (std::string p : {"q", "k", "v"}) CHECK(split_of(*op, "layers.0.attn." + p + "_proj.weight") == "column");
  CHECK(split_of(*op, "layers.0.attn.o_proj.weight") == "row");
  for (std::string p : {"gate", "up"}) {
    CHECK(split_of(*op, "layers.0.mlp." + p + "_proj.qweight") == "column");
    CHECK(split_of(*op, "layers.0.mlp." + p + "_proj.scales") == "column");
    CHECK(split_of(*op, "layers.0.mlp." + p + "_proj.zero_points") == "column");
  }
  CHECK(split_of(*op, "layers.0.mlp.down_proj.qweight") == "row");
  CHECK(split_of(*op, "layers.0.mlp.down_proj.scales") == "row");
  CHECK(split_of(*op, "embed_tokens.weight") == "vocab");
  CHECK(split_of(*op, "lm_head.weight") == "vocab");
  CHECK(split_of(*op, "layers.0.norm.weight") == "replicated");
}

TEST_CASE("rules: the first match wins, so rules put first override the defaults") {
  ScratchDir dir("shard-rules-override");
  auto m = hf_model(dir);
  REQUIRE(m.ok());
  std::vector<ShardRule> rules = {{"keep-head", "lm_head.weight", ShardSplit::replicated, {}, 0}};
  for (ShardRule& r : default_shard_rules()) rules.push_back(std::move(r));
  auto plan = plan_shards(*m, ShardSpec{2, 0, rules});
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  CHECK(split_of(*plan, "lm_head.weight") == "replicated");
  CHECK(shard_of(*plan, "lm_head.weight").rule == "keep-head");
  CHECK(split_of(*plan, "model.embed_tokens.weight") == "vocab");
  // Rules given alone replace the defaults: everything else is whole.
  auto only = plan_shards(*m, ShardSpec{2, 0, {rules[0]}});
  REQUIRE(only.ok());
  CHECK(split_of(*only, "model.layers.0.self_attn.q_proj.weight") == "replicated");
}

TEST_CASE("rules file: overrides before the built-in rules, parts for a fused weight, errors naming the rule") {
  ScratchDir dir("shard-rules-file");
  auto m = hf_model(dir);
  REQUIRE(m.ok());
  const auto file = dir.write("rules.json", std::string_view(R"({"rules": [
      {"name": "qkv", "pattern": "*.qkv_proj.weight", "split": "column", "parts": [8, 4, 4]},
      {"pattern": "lm_head.weight", "split": "replicated"}]})"));
  auto rules = cli::read_shard_rules_file(file);
  REQUIRE_MESSAGE(rules.ok(), rules.error().to_string());
  CHECK(rules->size() == 2 + default_shard_rules().size());
  auto plan = plan_shards(*m, ShardSpec{2, 1, *rules});
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  const WeightShard& qkv = shard_of(*plan, "model.layers.0.self_attn.qkv_proj.weight");
  CHECK(qkv.split == ShardSplit::column);
  CHECK(qkv.parts == 3);
  CHECK(qkv.ranges.size() == 3);
  CHECK(split_of(*plan, "lm_head.weight") == "replicated");
  CHECK(shard_of(*plan, "lm_head.weight").rule == "file rule 1");
  CHECK(split_of(*plan, "model.layers.0.self_attn.o_proj.weight") == "row");  // the defaults follow

  auto without = cli::read_shard_rules_file(
      dir.write("only.json", std::string_view(R"({"defaults": false, "rules": [{"pattern": "*", "split": "replicated"}]})")));
  REQUIRE(without.ok());
  CHECK(without->size() == 1);

  for (auto [text, words] : std::vector<std::pair<std::string, std::string>>{
           {R"({"rules": [{"pattern": "x", "split": "diagonal"}]})", "rule 0: \"split\" 'diagonal'"},
           {R"({"rules": [{"pattern": "x"}]})", "rule 0 has no \"split\""},
           {R"({"rules": [{"pattern": "x", "split": "column", "parts": [4, 0]}]})", "not a positive size"},
           {R"({"rules": [], "extra": 1})", "unknown key 'extra'"},
           {R"({"rules": [{"pattern": "x", "split": "column", "parts": []}]})", "\"parts\" is empty"},
           {R"({"rules": [{"pattern": "x", "split": "column"}, {"name": "", "pattern": "y", "split": "row"}]})",
            "rule 1: \"name\" is empty"},
           {R"({"rules": [{"pattern": "x", "split": "row", "split": "column"}]})", "'split' appears twice"},
           {R"({"rules": [], "rules": []})", "'rules' appears twice"},
           {R"([1, 2])", "not a JSON object"},
           {R"({"rules": [)", "not valid JSON"}}) {
    auto bad = cli::read_shard_rules_file(dir.write("bad.json", std::string_view(text)));
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == ErrorCode::invalid_argument);
    CHECK_MESSAGE(bad.error().message.find(words) != std::string::npos, bad.error().message);
  }
  CHECK(cli::read_shard_rules_file(dir / "missing.json").code() == ErrorCode::not_found);
}

TEST_CASE("rules that match no weight are listed, in rule order, on every rank's plan and on all of them") {
  ScratchDir dir("shard-unmatched");
  auto m = hf_model(dir);
  REQUIRE(m.ok());
  std::vector<ShardRule> rules = {{"typo", "*.q_prj.weight", ShardSplit::column, {}, 0},
                                  {"head", "lm_head.weight", ShardSplit::replicated, {}, 0},
                                  {"also-typo", "model.layers.9.*", ShardSplit::row, {}, 0}};
  auto plan = plan_shards(*m, ShardSpec{2, 1, rules});
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  CHECK(plan->unmatched_rules == std::vector<std::string>{"typo", "also-typo"});
  auto all = plan_shards_all(*m, ShardSpec{2, 0, rules});
  REQUIRE(all.ok());
  CHECK(all->unmatched_rules == std::vector<std::string>{"typo", "also-typo"});
  for (const ShardPlan& p : all->ranks) CHECK(p.unmatched_rules == all->unmatched_rules);
  // A rule an earlier one shadows decides nothing either.
  std::vector<ShardRule> shadowed = {{"first", "*.q_proj.weight", ShardSplit::column, {}, 0},
                                     {"second", "*.q_proj.weight", ShardSplit::row, {}, 0}};
  auto shadow = plan_shards(*m, ShardSpec{2, 0, shadowed});
  REQUIRE(shadow.ok());
  CHECK(shadow->unmatched_rules == std::vector<std::string>{"second"});
  // A rule only MatMulNBits scales match decides nothing: scales follow their B.
  ScratchDir onnx_dir("shard-unmatched-onnx");
  auto onnx = llm_onnx().write(onnx_dir);
  REQUIRE_MESSAGE(onnx.ok(), onnx.error().to_string());
  std::vector<ShardRule> scales_rule = {{"scales", "*.scales", ShardSplit::replicated, {}, 0}};
  for (ShardRule& r : default_shard_rules()) scales_rule.push_back(std::move(r));
  auto with_scales = plan_shards(*onnx, ShardSpec{2, 0, scales_rule});
  REQUIRE_MESSAGE(with_scales.ok(), with_scales.error().to_string());
  REQUIRE_FALSE(with_scales->unmatched_rules.empty());
  CHECK(with_scales->unmatched_rules.front() == "scales");
  // The defaults on a Hugging Face model: the GGUF and ONNX rules match nothing, the HF ones do.
  auto defaults = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(defaults.ok());
  CHECK_FALSE(defaults->unmatched_rules.empty());
  CHECK(std::find(defaults->unmatched_rules.begin(), defaults->unmatched_rules.end(), "hf-embedding") ==
        defaults->unmatched_rules.end());
}

TEST_CASE("refusals: world, rank, uneven and impossible splits, bad rules") {
  ScratchDir dir("shard-refusals");
  auto m = hf_model(dir);
  REQUIRE(m.ok());
  auto refused = [&](ShardSpec spec) {
    auto plan = plan_shards(*m, spec);
    REQUIRE_FALSE(plan.ok());
    return plan.error();
  };
  CHECK(refused({0, 0, {}}).code == ErrorCode::invalid_argument);
  CHECK(refused({2, 2, {}}).code == ErrorCode::invalid_argument);
  CHECK(refused({2, 2, {}}).message.find("rank 2 is outside a world of 2") != std::string::npos);
  CHECK(refused({kMaxShardWorld + 1, 0, {}}).code == ErrorCode::invalid_argument);
  CHECK(plan_shards_all(*m, ShardSpec{0, 0, {}}).code() == ErrorCode::invalid_argument);
  // World 3: 16 vocab rows are not a multiple of 3 (the first split weight).
  const Error uneven = refused({3, 0, {}});
  CHECK(uneven.code == ErrorCode::unsupported);
  CHECK(uneven.tensor == "model.embed_tokens.weight");
  CHECK_MESSAGE(uneven.to_string().find("16, not a multiple of the world size 3") != std::string::npos, uneven.to_string());
  // ... and which worlds would split every weight: those whose plans
  // succeed, asked one by one (2 and 4 here: a 4-row weight bounds them).
  std::string fit;
  for (std::uint32_t w = 2; w <= kMaxShardWorld; w = w < 16 ? w + 1 : w * 2)
    if (plan_shards(*m, ShardSpec{w, 0, {}}).ok()) fit += (fit.empty() ? "" : ", ") + std::to_string(w);
  CHECK(fit == "2, 4");
  CHECK_MESSAGE(uneven.message.ends_with("worlds (of 2-16 and the powers of two) that split every weight under these rules: " + fit),
                uneven.message);
  // World 32: more ranks than the 16 vocab rows.
  const Error wide = refused({32, 0, {}});
  CHECK(wide.code == ErrorCode::unsupported);
  CHECK_MESSAGE(wide.to_string().find("fewer than the ranks") != std::string::npos, wide.to_string());
  // A refusal every world makes (a bad rule) lists no worlds.
  CHECK(refused({2, 0, {{"both", "x", ShardSplit::column, {1}, 2}}}).message.find("worlds") == std::string::npos);
  // A fused part that does not split: gate_up as parts 10 + 14 over world 2 is
  // even (5, 7) but q/k/v of 8 + 5 + 3 is not.
  ShardRule qkv{"qkv", "*.qkv_proj.weight", ShardSplit::column, {8, 5, 3}, 0};
  const Error part = refused({2, 0, {qkv}});
  CHECK(part.tensor == "model.layers.0.self_attn.qkv_proj.weight");
  CHECK_MESSAGE(part.to_string().find("part 1 of axis 0") != std::string::npos, part.to_string());
  qkv.parts = {8, 4};
  CHECK_MESSAGE(refused({2, 0, {qkv}}).message.find("do not add up to") != std::string::npos, refused({2, 0, {qkv}}).message);
  // Bad rules: a pattern, both kinds of parts, parts of a replicated weight.
  CHECK(refused({2, 0, {{"bad", "a{b", ShardSplit::column, {}, 0}}}).code == ErrorCode::invalid_argument);
  CHECK(refused({2, 0, {{"both", "x", ShardSplit::column, {1}, 2}}}).code == ErrorCode::invalid_argument);
  CHECK(refused({2, 0, {{"rep", "x", ShardSplit::replicated, {}, 2}}}).code == ErrorCode::invalid_argument);
  // A row split of a 1-D weight has no input axis.
  const Error bias = refused({2, 0, {{"bias-row", "*.q_proj.bias", ShardSplit::row, {}, 0}}});
  CHECK(bias.code == ErrorCode::invalid_argument);
  CHECK(bias.tensor == "model.layers.0.self_attn.q_proj.bias");
}

TEST_CASE("a GPTQ qweight no MatMulNBits node reads is refused when cut, not guessed; whole at world 1") {
  ScratchDir dir("shard-gptq");
  auto m = open_model(dir.write("m.safetensors", st_file({{"model.layers.0.self_attn.q_proj.qweight", "I32", {1, 8}, pattern(32)}})));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_shards(*m, ShardSpec{2, 0, {}});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().code == ErrorCode::unsupported);
  CHECK(plan.error().message.find("GPTQ/AWQ") != std::string::npos);
  // One rank cuts nothing: the weight whole, one range, its own dims.
  auto one = plan_shards(*m, ShardSpec{1, 0, {}});
  REQUIRE_MESSAGE(one.ok(), one.error().to_string());
  const WeightShard& q = shard_of(*one, "model.layers.0.self_attn.q_proj.qweight");
  CHECK(q.dims == Dims{1, 8});
  CHECK(q.ranges.size() == 1);
  CHECK(q.ranges[0].length == 32);
  CHECK(q.strided.empty());
}
