// Shard plans per format (issue 29): which stored axis each split cuts,
// the exact byte ranges and strided views, exact cover across ranks.
#include "unit/shard/models.hpp"

using namespace ballast;
using namespace ballast::testing;

namespace {

ShardPlans all(const Model& m, std::uint32_t world, std::vector<ShardRule> rules = {}) {
  auto plans = plan_shards_all(m, ShardSpec{world, 0, std::move(rules)});
  REQUIRE_MESSAGE(plans.ok(), plans.error().to_string());
  return std::move(*plans);
}

std::uint64_t base_of(const Model& m, std::string_view name) {
  const WeightRef* w = m.weight(name);
  REQUIRE(w != nullptr);
  return m.store().external_mmap_provenance(*w)->offset;
}

// The rules for the fused QKV of the safetensors model, before the defaults.
std::vector<ShardRule> with_qkv_parts() {
  std::vector<ShardRule> rules = {{"qkv", "*.qkv_proj.weight", ShardSplit::column, {8, 4, 4}, 0}};
  for (ShardRule& r : default_shard_rules()) rules.push_back(std::move(r));
  return rules;
}

}  // namespace

TEST_CASE("safetensors [out, in]: column and vocab are byte ranges of whole rows, row is a strided view") {
  ScratchDir dir("shard-st");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ShardPlans p = all(*m, 2, with_qkv_parts());
  check_exact_cover(*m, p);
  const std::string l = "model.layers.0.";
  for (std::uint32_t r = 0; r < 2; ++r) {
    const ShardPlan& plan = p.ranks[r];
    // q_proj [8 out, 8 in] f16: rows of 16 bytes; rank r takes 4 rows.
    const WeightShard& q = shard_of(plan, l + "self_attn.q_proj.weight");
    const std::uint64_t qb = base_of(*m, l + "self_attn.q_proj.weight");
    CHECK(q.split == ShardSplit::column);
    CHECK(q.rule == "hf-column");
    CHECK(q.axis == 0);
    CHECK(q.contiguous());
    CHECK(q.ranges == std::vector<ByteRange>{{qb + r * 64, 64}});
    CHECK(q.dims == Dims{4, 8});
    // Its bias: the same output features.
    const WeightShard& qbias = shard_of(plan, l + "self_attn.q_proj.bias");
    CHECK(qbias.split == ShardSplit::column);
    CHECK(qbias.ranges == std::vector<ByteRange>{{base_of(*m, l + "self_attn.q_proj.bias") + r * 16, 16}});
    // o_proj [8 out, 8 in] row: the inner axis, 8 bytes of every 16-byte row.
    const WeightShard& o = shard_of(plan, l + "self_attn.o_proj.weight");
    CHECK(o.split == ShardSplit::row);
    CHECK(o.axis == 1);
    REQUIRE(o.strided.size() == 1);
    CHECK(o.strided[0] == StridedView{base_of(*m, l + "self_attn.o_proj.weight") + r * 8, 8, 16, 8});
    CHECK(o.dims == Dims{8, 4});
    CHECK(o.device_bytes == 64);
    // A row layer's bias and the norms: whole on every rank.
    for (std::string name : {l + "self_attn.o_proj.bias", l + "input_layernorm.weight", std::string("model.norm.weight")}) {
      const WeightShard& s = shard_of(plan, name);
      CHECK_MESSAGE(s.split == ShardSplit::replicated, name);
      CHECK(s.ranges == std::vector<ByteRange>{{base_of(*m, name), 32}});
    }
    // down_proj [8, 12] row: 6 of 12 inputs, 12 bytes of each 24.
    const WeightShard& down = shard_of(plan, l + "mlp.down_proj.weight");
    CHECK(down.strided == std::vector<StridedView>{{base_of(*m, l + "mlp.down_proj.weight") + r * 12, 12, 24, 8}});
    // Embedding [16 vocab, 8] f32 and lm_head [16 vocab, 8] f16: vocab rows.
    CHECK(shard_of(plan, "model.embed_tokens.weight").ranges ==
          std::vector<ByteRange>{{base_of(*m, "model.embed_tokens.weight") + r * 256, 256}});
    const WeightShard& head = shard_of(plan, "lm_head.weight");
    CHECK(head.split == ShardSplit::vocab);
    CHECK(head.ranges == std::vector<ByteRange>{{base_of(*m, "lm_head.weight") + r * 128, 128}});
    // Fused: gate_up (two equal parts of 12 rows) and qkv (8, 4, 4 rows):
    // one range per part, each part split on its own.
    const WeightShard& gu = shard_of(plan, l + "mlp.gate_up_proj.weight");
    const std::uint64_t gb = base_of(*m, l + "mlp.gate_up_proj.weight");
    CHECK(gu.parts == 2);
    CHECK(gu.ranges == std::vector<ByteRange>{{gb + r * 96, 96}, {gb + 192 + r * 96, 96}});
    CHECK(gu.dims == Dims{12, 8});
    const WeightShard& qkv = shard_of(plan, l + "self_attn.qkv_proj.weight");
    const std::uint64_t kb = base_of(*m, l + "self_attn.qkv_proj.weight");
    CHECK(qkv.rule == "qkv");
    CHECK(qkv.ranges == std::vector<ByteRange>{{kb + r * 64, 64}, {kb + 128 + r * 32, 32}, {kb + 192 + r * 32, 32}});
    CHECK(qkv.device_bytes == 128);
  }
  // Totals: replicated weights (3 x 32 bytes) on both ranks, the rest halved.
  std::uint64_t all_bytes = 0;
  for (const StTensor& t : hf_tensors()) all_bytes += t.bytes.size();
  CHECK(p.union_bytes == all_bytes);
  for (const ShardPlan& plan : p.ranks) {
    CHECK(plan.totals.read_bytes == (all_bytes - 96) / 2 + 96);
    CHECK(plan.totals.device_bytes == plan.totals.read_bytes);
    CHECK(plan.totals.gathered_bytes == 64 + 96);  // o_proj and down_proj
  }
  CHECK(p.read_bytes_sum == all_bytes + 96);
}

TEST_CASE("GGUF: column and vocab on the outer axis, row on whole blocks of the type") {
  ScratchDir dir("shard-gguf");
  auto m = open_model(dir.write("m.gguf", gguf_of(gguf_llama())));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ShardPlans p = all(*m, 2);
  check_exact_cover(*m, p);
  for (std::uint32_t r = 0; r < 2; ++r) {
    const ShardPlan& plan = p.ranks[r];
    // token_embd: ne [32, 4] q8_0 = 4 vocab rows of one 34-byte block.
    const WeightShard& embd = shard_of(plan, "token_embd.weight");
    CHECK(embd.split == ShardSplit::vocab);
    CHECK(embd.ranges == std::vector<ByteRange>{{base_of(*m, "token_embd.weight") + r * 68, 68}});
    CHECK(embd.dims == Dims{2, 32});
    // attn_q: [out 4, in 8] f32, column: rows.
    CHECK(shard_of(plan, "blk.0.attn_q.weight").ranges ==
          std::vector<ByteRange>{{base_of(*m, "blk.0.attn_q.weight") + r * 64, 64}});
    // attn_output: [4, 8] f16 row: 4 of 8 inputs.
    CHECK(shard_of(plan, "blk.0.attn_output.weight").strided ==
          std::vector<StridedView>{{base_of(*m, "blk.0.attn_output.weight") + r * 8, 8, 16, 4}});
    // ffn_down: [out 2, in 64] q4_0 (blocks of 32 in 18 bytes): one block each.
    const WeightShard& down = shard_of(plan, "blk.0.ffn_down.weight");
    CHECK(down.strided == std::vector<StridedView>{{base_of(*m, "blk.0.ffn_down.weight") + r * 18, 18, 36, 2}});
    CHECK(down.dims == Dims{2, 32});
    CHECK(shard_of(plan, "blk.0.attn_norm.weight").split == ShardSplit::replicated);
    // Experts [2, out 4, in 32] f32, column: 2 of 4 rows in each expert.
    const WeightShard& exps = shard_of(plan, "blk.0.ffn_gate_exps.weight");
    CHECK(exps.axis == 1);
    CHECK(exps.strided == std::vector<StridedView>{{base_of(*m, "blk.0.ffn_gate_exps.weight") + r * 256, 256, 512, 2}});
    CHECK(exps.dims == Dims{2, 2, 32});
    CHECK(shard_of(plan, "output.weight").ranges ==
          std::vector<ByteRange>{{base_of(*m, "output.weight") + r * 32, 32}});
  }
}

TEST_CASE("GGUF: a row split that breaks a block is refused, naming the sizes") {
  ScratchDir dir("shard-gguf-block");
  auto tensors = gguf_llama();
  tensors[3] = {"blk.0.ffn_down.weight", {32, 2}, kGgufQ4_0, 2 * 18};  // one block per row
  auto m = open_model(dir.write("m.gguf", gguf_of(tensors)));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_shards(*m, ShardSpec{2, 0, {}});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().code == ErrorCode::unsupported);
  CHECK(plan.error().tensor == "blk.0.ffn_down.weight");
  const std::string text = plan.error().to_string();
  CHECK_MESSAGE(text.find("16 of 32 elements") != std::string::npos, text);
  CHECK_MESSAGE(text.find("not whole blocks of 32 q4_0 elements") != std::string::npos, text);
  // World 1 needs no cut: the same model plans.
  CHECK(plan_shards(*m, ShardSpec{1, 0, {}}).ok());
}

TEST_CASE("ONNX: layouts from the consuming node; MatMulNBits scales and zero points follow B") {
  ScratchDir dir("shard-onnx");
  auto m = llm_onnx().write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ShardPlans p = all(*m, 2);
  check_exact_cover(*m, p);
  for (std::uint32_t r = 0; r < 2; ++r) {
    const ShardPlan& plan = p.ranks[r];
    // MatMul B [K=8, N=8] f16: column is the inner axis N (strided) ...
    const WeightShard& q = shard_of(plan, "layers.0.attn.q_proj.weight");
    CHECK(q.split == ShardSplit::column);
    CHECK(q.axis == 1);
    CHECK(q.layout.find("MatMul B [K, N]") != std::string::npos);
    CHECK(q.strided == std::vector<StridedView>{{base_of(*m, "layers.0.attn.q_proj.weight") + r * 8, 8, 16, 8}});
    CHECK(q.dims == Dims{8, 4});
    // ... and row the outer axis K (a byte range).
    const WeightShard& o = shard_of(plan, "layers.0.attn.o_proj.weight");
    CHECK(o.split == ShardSplit::row);
    CHECK(o.axis == 0);
    CHECK(o.ranges == std::vector<ByteRange>{{base_of(*m, "layers.0.attn.o_proj.weight") + r * 64, 64}});
    // Gather data [vocab 16, 8]: vocab rows; lm_head MatMul B [8, vocab 16]: the inner axis.
    CHECK(shard_of(plan, "embed_tokens.weight").ranges ==
          std::vector<ByteRange>{{base_of(*m, "embed_tokens.weight") + r * 256, 256}});
    const WeightShard& head = shard_of(plan, "lm_head.weight");
    CHECK(head.split == ShardSplit::vocab);
    CHECK(head.strided == std::vector<StridedView>{{base_of(*m, "lm_head.weight") + r * 32, 32, 64, 8}});
    // MatMulNBits gate (K=64 N=4 block 16: B [4, 4, 8], f16 scales [16],
    // packed zero points [4 x 2]): column on N, all three by whole rows.
    const std::string g = "layers.0.mlp.gate_proj.";
    const WeightShard& gb = shard_of(plan, g + "qweight");
    CHECK(gb.split == ShardSplit::column);
    CHECK(gb.ranges == std::vector<ByteRange>{{base_of(*m, g + "qweight") + r * 64, 64}});
    CHECK(gb.dims == Dims{2, 4, 8});
    const WeightShard& gs = shard_of(plan, g + "scales");
    CHECK(gs.split == ShardSplit::column);
    CHECK(gs.rule == "hf-column");  // B's rule
    CHECK(gs.ranges == std::vector<ByteRange>{{base_of(*m, g + "scales") + r * 16, 16}});
    CHECK(gs.dims == Dims{8});
    CHECK(shard_of(plan, g + "zero_points").ranges ==
          std::vector<ByteRange>{{base_of(*m, g + "zero_points") + r * 4, 4}});
    // down (K=64 N=4, f32 scales [4 x 4], no zero points): row on k-blocks,
    // 2 of 4 blocks per row of B (16 of 32 bytes) and of scales (8 of 16).
    const std::string d = "layers.0.mlp.down_proj.";
    const WeightShard& db = shard_of(plan, d + "qweight");
    CHECK(db.split == ShardSplit::row);
    CHECK(db.strided == std::vector<StridedView>{{base_of(*m, d + "qweight") + r * 16, 16, 32, 4}});
    CHECK(db.dims == Dims{4, 2, 8});
    CHECK(shard_of(plan, d + "scales").strided ==
          std::vector<StridedView>{{base_of(*m, d + "scales") + r * 8, 8, 16, 4}});
    // The inline norm: whole, offsets within its own bytes.
    const WeightShard& norm = shard_of(plan, "layers.0.norm.weight");
    CHECK(norm.split == ShardSplit::replicated);
    CHECK_FALSE(norm.mapping.has_value());
    CHECK(norm.ranges == std::vector<ByteRange>{{0, 32}});
  }
}

TEST_CASE("ONNX Gemm: transB stores [N, K], so column is the outer axis; C is [N]") {
  using namespace onnx_proto;
  ScratchDir dir("shard-gemm");
  OnnxWriter w;
  w.add("fc.up_proj.weight", kFloat, {4, 8}, 128);  // [N=4, K=8]
  w.add("fc.up_proj.bias", kFloat, {4}, 16);
  w.add("fc.down_proj.weight", kFloat, {4, 8}, 128);  // [K=4, N=8] without transB
  w.nodes.push_back(named_node("up", "Gemm", {"x", "fc.up_proj.weight", "fc.up_proj.bias"}, {"h"}, {attribute_int("transB", 1)}));
  w.nodes.push_back(named_node("down", "Gemm", {"h", "fc.down_proj.weight"}, {"y"}));
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ShardPlans p = all(*m, 2);
  check_exact_cover(*m, p);
  for (std::uint32_t r = 0; r < 2; ++r) {
    const WeightShard& up = shard_of(p.ranks[r], "fc.up_proj.weight");
    CHECK(up.layout.find("transB") != std::string::npos);
    CHECK(up.ranges == std::vector<ByteRange>{{base_of(*m, "fc.up_proj.weight") + r * 64, 64}});
    CHECK(shard_of(p.ranks[r], "fc.up_proj.bias").ranges ==
          std::vector<ByteRange>{{base_of(*m, "fc.up_proj.bias") + r * 8, 8}});
    // Row of a [K, N] Gemm B: the outer axis K.
    CHECK(shard_of(p.ranks[r], "fc.down_proj.weight").ranges ==
          std::vector<ByteRange>{{base_of(*m, "fc.down_proj.weight") + r * 64, 64}});
  }
}

TEST_CASE("ONNX MatMul and Gemm of the domain spelled 'ai.onnx': the layouts of the empty domain's") {
  using namespace onnx_proto;
  ScratchDir dir("shard-ai-onnx");
  OnnxWriter w;
  w.add("fc.up_proj.weight", kFloat, {4, 8}, 128);    // [N=4, K=8] under Gemm transB=1
  w.add("fc.down_proj.weight", kFloat, {8, 4}, 128);  // [K=8, N=4] under MatMul
  w.nodes.push_back(
      named_node("up", "Gemm", {"x", "fc.up_proj.weight"}, {"h"}, {attribute_int("transB", 1)}, "ai.onnx"));
  w.nodes.push_back(named_node("down", "MatMul", {"h", "fc.down_proj.weight"}, {"y"}, {}, "ai.onnx"));
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ShardPlans p = all(*m, 2);
  check_exact_cover(*m, p);
  for (std::uint32_t r = 0; r < 2; ++r) {
    const WeightShard& up = shard_of(p.ranks[r], "fc.up_proj.weight");
    CHECK(up.layout.find("Gemm B [N, K] (transB)") != std::string::npos);
    CHECK(up.ranges == std::vector<ByteRange>{{base_of(*m, "fc.up_proj.weight") + r * 64, 64}});
    // down_proj is row-parallel: [K, N] is cut on K, the outer axis.
    const WeightShard& down = shard_of(p.ranks[r], "fc.down_proj.weight");
    CHECK(down.layout.find("MatMul B [K, N]") != std::string::npos);
    CHECK(down.ranges == std::vector<ByteRange>{{base_of(*m, "fc.down_proj.weight") + r * 64, 64}});
  }
}

TEST_CASE("ONNX MatMul/Gemm B through Identity and Transpose: the weight's own axes, as the planner reads them") {
  using namespace onnx_proto;
  ScratchDir dir("shard-forwarded");
  OnnxWriter w;
  w.add("fc.up_proj.weight", kFloat, {8, 4}, 128);    // [K=8, N=4], read through Identity (a shared module)
  w.add("fc.q_proj.weight", kFloat, {8, 4}, 128);     // [K=8, N=4], Gemm transB=1 of Transpose(W): [K, N] again
  w.add("fc.gate_proj.weight", kFloat, {4, 8}, 128);  // [N=4, K=8], MatMul of Transpose(W) (no constant folding)
  w.nodes.push_back(named_node("share", "Identity", {"fc.up_proj.weight"}, {"up_w"}));
  w.nodes.push_back(named_node("up", "MatMul", {"x", "up_w"}, {"u"}));
  w.nodes.push_back(named_node("tq", "Transpose", {"fc.q_proj.weight"}, {"q_t"}, {attribute_ints("perm", {1, 0})}));
  w.nodes.push_back(named_node("q", "Gemm", {"x", "q_t"}, {"q_out"}, {attribute_int("transB", 1)}));
  w.nodes.push_back(named_node("tg", "Transpose", {"fc.gate_proj.weight"}, {"g_t"}));
  w.nodes.push_back(named_node("gate", "MatMul", {"x", "g_t"}, {"g"}));
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ShardPlans p = all(*m, 2);
  check_exact_cover(*m, p);
  for (std::uint32_t r = 0; r < 2; ++r) {
    // [K, N] column-parallel: the inner axis N, 2 of 4 columns of each row.
    // The format's [out, in] convention would have cut rows of K instead.
    for (const char* name : {"fc.up_proj.weight", "fc.q_proj.weight"}) {
      const WeightShard& s = shard_of(p.ranks[r], name);
      CAPTURE(name);
      CHECK(s.split == ShardSplit::column);
      CHECK(s.axis == 1);
      CHECK(s.ranges.empty());
      CHECK(s.strided == std::vector<StridedView>{{base_of(*m, name) + r * 8, 8, 16, 8}});
      CHECK(s.dims == Dims{8, 2});
    }
    CHECK(shard_of(p.ranks[r], "fc.up_proj.weight").layout.find("through Identity 'share'") != std::string::npos);
    CHECK(shard_of(p.ranks[r], "fc.q_proj.weight").layout.find("through Transpose 'tq'") != std::string::npos);
    // [N, K] through one Transpose: the outer axis, whole rows.
    const WeightShard& g = shard_of(p.ranks[r], "fc.gate_proj.weight");
    CHECK(g.axis == 0);
    CHECK(g.ranges == std::vector<ByteRange>{{base_of(*m, "fc.gate_proj.weight") + r * 64, 64}});
    CHECK(g.layout.find("MatMul B [N, K] through Transpose 'tg'") != std::string::npos);
  }
}

TEST_CASE(
    "ONNX: a tied embedding (Gather, and the head's MatMul of its Transpose) is one layout; two that differ "
    "are refused where the weight is cut") {
  using namespace onnx_proto;
  ScratchDir dir("shard-tied");
  OnnxWriter w;
  w.add("model.embed_tokens.weight", kFloat, {16, 8}, 512);  // [vocab 16, hidden 8]
  w.add("fc.up_proj.weight", kFloat, {8, 4}, 128);           // read as [K, N] and, transposed, as [N, K]
  w.nodes.push_back(named_node("embed", "Gather", {"model.embed_tokens.weight", "ids"}, {"h"}));
  w.nodes.push_back(
      named_node("t", "Transpose", {"model.embed_tokens.weight"}, {"head_w"}, {attribute_ints("perm", {1, 0})}));
  w.nodes.push_back(named_node("lm_head", "MatMul", {"h", "head_w"}, {"logits"}));
  w.nodes.push_back(named_node("up", "MatMul", {"h", "fc.up_proj.weight"}, {"u"}));
  w.nodes.push_back(named_node("tu", "Transpose", {"fc.up_proj.weight"}, {"up_t"}));
  w.nodes.push_back(named_node("up_again", "MatMul", {"u", "up_t"}, {"v"}));
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  // The tied embedding: vocab rows, by both readers' account.
  const std::vector<ShardRule> tied_only = {{"vocab", "model.embed_tokens.weight", ShardSplit::vocab, {}, 0},
                                            {"rest", "*", ShardSplit::replicated, {}, 0}};
  auto tied = plan_shards_all(*m, ShardSpec{2, 0, tied_only});
  REQUIRE_MESSAGE(tied.ok(), tied.error().to_string());
  for (std::uint32_t r = 0; r < 2; ++r)
    CHECK(shard_of(tied->ranks[r], "model.embed_tokens.weight").ranges ==
          std::vector<ByteRange>{{base_of(*m, "model.embed_tokens.weight") + r * 256, 256}});
  // up_proj read in two layouts: refused when cut, whole at world 1.
  auto cut = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(cut.error().to_string().find("two layouts") != std::string::npos, cut.error().to_string());
  CHECK(cut.error().tensor == "fc.up_proj.weight");
  auto one = plan_shards_all(*m, ShardSpec{1, 0, {}});
  REQUIRE_MESSAGE(one.ok(), one.error().to_string());
  CHECK(shard_of(one->ranks[0], "fc.up_proj.weight").ranges ==
        std::vector<ByteRange>{{base_of(*m, "fc.up_proj.weight"), 128}});
}

TEST_CASE("ONNX: one MatMulNBits B read by two nodes of different block sizes is two layouts, refused when cut") {
  using namespace onnx_proto;
  ScratchDir dir("shard-nbits-two");
  OnnxWriter w;
  add_nbits(w, "layers.0.mlp.gate_proj", false, kFloat);  // K=64, N=4, block 16
  // The same B and scales read as K=32, block 8 (so the same N and k_blocks):
  // the grid differs, so no split fits both readers.
  w.nodes.push_back(named_node(
      "again", "MatMulNBits", {"y", "layers.0.mlp.gate_proj.qweight", "layers.0.mlp.gate_proj.scales"}, {"again_out"},
      {attribute_int("K", 32), attribute_int("N", 4), attribute_int("bits", 4), attribute_int("block_size", 8)},
      "com.microsoft"));
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto cut = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(cut.error().to_string().find("two layouts") != std::string::npos, cut.error().to_string());
  CHECK(cut.error().tensor == "layers.0.mlp.gate_proj.qweight");
}

TEST_CASE("ONNX MatMulNBits row split: packed zero points on whole bytes, k on whole blocks") {
  ScratchDir dir("shard-nbits");
  OnnxWriter w;
  add_nbits(w, "layers.0.mlp.down_proj", true, kFloat16);  // K=64 block 16: 4 k-blocks, 2 zero-point bytes a row
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ShardPlans two = all(*m, 2);
  check_exact_cover(*m, two);
  const std::string zp = "layers.0.mlp.down_proj.zero_points";
  for (std::uint32_t r = 0; r < 2; ++r)
    CHECK(shard_of(two.ranks[r], zp).strided == std::vector<StridedView>{{base_of(*m, zp) + r, 1, 2, 4}});
  // World 4: one k-block each, half a zero-point byte: refused.
  auto four = plan_shards(*m, ShardSpec{4, 1, {}});
  REQUIRE_FALSE(four.ok());
  CHECK(four.error().code == ErrorCode::unsupported);
  CHECK(four.error().tensor == zp);
  CHECK_MESSAGE(four.error().to_string().find("two k-blocks per byte") != std::string::npos, four.error().to_string());
  // Block 32 over world 4: 16 of 64 features per rank, not whole blocks.
  ScratchDir dir2("shard-nbits-block");
  OnnxWriter w2;
  add_nbits(w2, "layers.0.mlp.down_proj", false, kFloat16, 64, 4, 32);
  auto m2 = w2.write(dir2);
  REQUIRE(m2.ok());
  auto bad = plan_shards(*m2, ShardSpec{4, 0, {}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().tensor == "layers.0.mlp.down_proj.qweight");
  CHECK_MESSAGE(bad.error().to_string().find("16 of 64 input features") != std::string::npos, bad.error().to_string());
  CHECK_MESSAGE(bad.error().to_string().find("not whole blocks") != std::string::npos, bad.error().to_string());
}

TEST_CASE("ONNX MatMulNBits with K not a multiple of block_size: whole at world 1, refused when cut") {
  // K 72, block 16: 5 k-blocks, the last partial (MatMulNBits pads it), and
  // 3 bytes of packed zero points a row. World 1 cuts nothing, so it must
  // plan (a one-rank job loads such a model whole); it was refused as "each
  // of 1 ranks would take 72 of 72 input features: not whole blocks".
  ScratchDir dir("shard-nbits-partial-block");
  OnnxWriter w;
  add_nbits(w, "layers.0.mlp.down_proj", true, kFloat16, 72, 4, 16);
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto one = plan_shards_all(*m, ShardSpec{1, 0, {}});
  REQUIRE_MESSAGE(one.ok(), one.error().to_string());
  check_exact_cover(*m, *one);
  const WeightShard& b = shard_of(one->ranks[0], "layers.0.mlp.down_proj.qweight");
  CHECK(b.split == ShardSplit::row);
  CHECK(b.dims == Dims{4, 5, 8});
  REQUIRE(b.ranges.size() == 1);
  CHECK(b.ranges[0].length == 4 * 5 * 8);
  CHECK(shard_of(one->ranks[0], "layers.0.mlp.down_proj.zero_points").device_bytes == 4 * 3);
  // Cut in two it breaks a block: refused, and no world is offered (none splits it).
  auto two = plan_shards(*m, ShardSpec{2, 0, {}});
  REQUIRE_FALSE(two.ok());
  CHECK(two.error().code == ErrorCode::unsupported);
  CHECK_MESSAGE(two.error().to_string().find("36 of 72 input features") != std::string::npos, two.error().to_string());
  CHECK_MESSAGE(two.error().to_string().find("no world of 2-16") != std::string::npos, two.error().to_string());
}

TEST_CASE("ONNX MatMulNBits whose N or block_size is 0 is refused as such, whatever else is wrong") {
  // The weights of a good node (K 64, N 4, block 16) under a node that
  // says N 0, or block_size 0: the node is what is wrong, and said so
  // before any size is compared with the bytes.
  for (const auto& [n, block] : {std::pair<std::int64_t, std::int64_t>{0, 16}, {4, 0}}) {
    CAPTURE(n);
    CAPTURE(block);
    ScratchDir dir("shard-nbits-zero");
    OnnxWriter w;
    add_nbits(w, "layers.0.mlp.down_proj", false, kFloat);
    w.nodes.back() =
        onnx_proto::named_node("layers.0.mlp.down_proj", "MatMulNBits",
                               {"x", "layers.0.mlp.down_proj.qweight", "layers.0.mlp.down_proj.scales"}, {"out"},
                               {onnx_proto::attribute_int("K", 64), onnx_proto::attribute_int("N", n),
                                onnx_proto::attribute_int("bits", 4), onnx_proto::attribute_int("block_size", block)},
                               "com.microsoft");
    auto m = w.write(dir);
    REQUIRE_MESSAGE(m.ok(), m.error().to_string());
    auto p = plan_shards(*m, ShardSpec{2, 0, {}});
    REQUIRE_FALSE(p.ok());
    CHECK(p.error().code == ErrorCode::invalid_argument);
    CHECK_MESSAGE(p.error().to_string().find("needs positive K, N and an even block_size") != std::string::npos,
                  p.error().to_string());
  }
}

TEST_CASE("weights sharing bytes are read once") {
  ScratchDir dir("shard-alias");
  OnnxWriter w;
  w.add("a.q_proj.weight", kFloat, {4, 8}, 128);
  w.alias("b.q_proj.weight", kFloat, {4, 8}, 0, 128);  // the same bytes
  w.nodes.push_back(onnx_proto::named_node("a", "MatMul", {"x", "a.q_proj.weight"}, {"ya"}));
  w.nodes.push_back(onnx_proto::named_node("b", "MatMul", {"x", "b.q_proj.weight"}, {"yb"}));
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  const ShardPlans p = all(*m, 2);
  CHECK(p.union_bytes == 128);
  for (const ShardPlan& plan : p.ranks) {
    CHECK(plan.totals.read_bytes == 64);     // the same strided half of both
    CHECK(plan.totals.device_bytes == 128);  // each weight's shard on the device
  }
}

TEST_CASE("world 1: every weight whole, one range") {
  ScratchDir dir("shard-one");
  auto m = llm_onnx().write(dir);
  REQUIRE(m.ok());
  auto plan = plan_shards(*m, ShardSpec{1, 0, {}});
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  for (const WeightShard& s : plan->weights) {
    const WeightRef& w = m->store().weights().at(s.id);
    CHECK_MESSAGE(s.contiguous(), s.weight);
    REQUIRE(s.ranges.size() == 1);
    CHECK(s.ranges[0].length == w.byte_length());
    CHECK(s.device_bytes == w.byte_length());
    CHECK(s.dims == w.dims);
  }
  CHECK(plan->totals.not_needed_bytes == 0);
  CHECK(plan->totals.read_bytes == plan->model_bytes);
}

TEST_CASE("derivations of shards: the launch over the rank's rows and columns; quant_int8 across a cut row planned "
          "with given maxima") {
  ScratchDir dir("shard-derive");
  auto m = llm_onnx().write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_derivations(*m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  const ShardPlans p = all(*m, 2);
  auto cut = plan_shard_derivations(*m, p.ranks[1], *plan);
  REQUIRE_MESSAGE(cut.ok(), cut.error().to_string());
  REQUIRE(cut->size() == plan->size());
  bool saw_down = false, saw_gate = false, saw_o_quant = false, saw_head = false;
  for (const ShardDerivation& d : *cut) {
    const PlannedDerivation& whole = (*plan)[d.planned];
    CAPTURE(whole.weight);
    CAPTURE(derivation_name(whole.kind()));
    CHECK(p.ranks[1].weights[d.source].id == whole.source);
    if (whole.weight == "layers.0.mlp.down_proj.qweight" && whole.kind() == Derivation::dequant_int4) {
      // Row split: K = 64 in blocks of 16, two of the four blocks per rank.
      REQUIRE(d.launch);
      CHECK(d.launch->rows == 4);
      CHECK(d.launch->cols == 32);
      CHECK(d.scales.has_value());
      saw_down = true;
    }
    if (whole.weight == "layers.0.mlp.gate_proj.qweight" && whole.kind() == Derivation::repack_int4) {
      // Column split: N = 4 rows, two per rank; K whole.
      REQUIRE(d.launch);
      CHECK(d.launch->rows == 2);
      CHECK(d.launch->cols == 64);
      CHECK(d.zero_points.has_value());
      saw_gate = true;
    }
    if (whole.weight == "layers.0.attn.o_proj.weight" && whole.kind() == Derivation::quant_int8) {
      // Row-parallel [K, N]: quantized per output channel over K, and the
      // rank holds half of K: planned, not skipped, over the rank's [N, K/2]
      // with the whole rows' maxima given (share_row_maxima).
      REQUIRE_MESSAGE(d.launch, d.skipped);
      CHECK(d.skipped.empty());
      CHECK(d.launch->kind == Derivation::quant_int8_given_max);
      CHECK(d.of_transposed);
      CHECK(d.launch->rows == 8);
      CHECK(d.launch->cols == 4);
      CHECK(d.launch->src_type == DataType::float16);
      saw_o_quant = true;
    }
    if (whole.weight == "lm_head.weight" && whole.kind() == Derivation::transpose) {
      // MatMul B [8, 16], vocab on the inner axis: [8, 8] per rank.
      REQUIRE(d.launch);
      CHECK(d.launch->rows == 8);
      CHECK(d.launch->cols == 8);
      saw_head = true;
    }
  }
  CHECK(saw_down);
  CHECK(saw_gate);
  CHECK(saw_o_quant);
  CHECK(saw_head);
}

TEST_CASE(
    "derivations of shards: a launch that does not read its weight as stored is skipped, whichever side differs") {
  ScratchDir dir("shard-derive-edited");
  auto m = llm_onnx().write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_derivations(*m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  const ShardPlans p = all(*m, 2);
  std::size_t head = plan->size();
  for (std::size_t i = 0; i < plan->size(); ++i)
    if ((*plan)[i].weight == "lm_head.weight" && (*plan)[i].kind() == Derivation::transpose) head = i;
  REQUIRE(head < plan->size());
  // lm_head.weight is [8, 16] as stored; a launch of [8, 8] or [4, 16]
  // (one side edited) reads something else.
  for (const auto& [rows, cols] : {std::pair<std::uint64_t, std::uint64_t>{8, 8}, {4, 16}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    std::vector<PlannedDerivation> edited(plan->begin() + static_cast<std::ptrdiff_t>(head),
                                          plan->begin() + static_cast<std::ptrdiff_t>(head) + 1);
    edited[0].launch.rows = rows;
    edited[0].launch.cols = cols;
    auto cut = plan_shard_derivations(*m, p.ranks[0], edited);
    REQUIRE_MESSAGE(cut.ok(), cut.error().to_string());
    REQUIRE(cut->size() == 1);
    CHECK_FALSE((*cut)[0].launch.has_value());
    CHECK_MESSAGE((*cut)[0].skipped.find("does not read the weight as stored ([8, 16])") != std::string::npos,
                  (*cut)[0].skipped);
  }
}
