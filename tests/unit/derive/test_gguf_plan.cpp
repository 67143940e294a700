// Planning GGUF tensors (issue 27): the built-in rules on llama-family
// names, dequant_gguf of each tensor as stored (rows = the outer dims), the
// refusals by type and size, and the memo and residency identities keeping
// one byte range read as two block types apart.
#include "unit/derive/plan_queries.hpp"
#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include "derive/identity.hpp"
#include "unit/gguf/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <algorithm>
#include <filesystem>

using namespace ballast;
using namespace ballast::testing;

namespace {

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> ne;  // innermost first
  std::uint32_t ggml_type;
  std::size_t bytes;
};

// A file of `tensors`, each at the next 32-byte boundary.
std::vector<std::uint8_t> file_of(const std::vector<Tensor>& tensors) {
  std::vector<GgufBytes> infos;
  std::size_t at = 0;
  for (const Tensor& t : tensors) {
    infos.push_back(tinfo(t.name, t.ne, t.ggml_type, at));
    at = (at + t.bytes + 31) / 32 * 32;
  }
  return gguf_file({kv_str("general.architecture", "llama")}, infos, at);
}

// ggml ids beyond writer.hpp's.
constexpr std::uint32_t kBF16 = 30, kQ4_1 = 3, kIQ2_XXS = 16;

const std::vector<Tensor> kLlama = {
    {"token_embd.weight", {32, 4}, kQ8_0, 4 * 34},
    {"blk.0.attn_q.weight", {256, 2}, kQ4_K, 2 * 144},
    {"blk.0.attn_k.weight", {8, 2}, kBF16, 32},
    {"blk.0.ffn_up.weight", {4, 8}, kF16, 64},
    {"blk.0.ffn_down.weight", {8, 4}, kF32, 128},
    {"blk.0.attn_norm.weight", {8}, kF32, 32},
    {"blk.0.ffn_gate_exps.weight", {32, 2, 3}, kQ4_0, 6 * 18},  // 3 experts of [2, 32]
    {"output.weight", {8, 4}, kF32, 128},
};

using ballast::testing::count;

const PlannedDerivation& find(const std::vector<PlannedDerivation>& plan, std::string_view weight, Derivation kind) {
  auto it = std::find_if(plan.begin(), plan.end(),
                         [&](const PlannedDerivation& p) { return p.weight == weight && p.kind() == kind; });
  REQUIRE(it != plan.end());
  return *it;
}

}  // namespace

TEST_CASE("GGUF llama names: the built-in rules plan each tensor by its type, naming the rule") {
  ScratchDir dir("gguf-plan");
  auto m = open_model(dir.write("m.gguf", file_of(kLlama)));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_derivations(*m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  // Block types and bf16: dequant_gguf; f16/f32 layers: transpose (+ to_f16
  // from f32); a float head: quant_int8; a norm: nothing.
  CHECK(count(*plan, "token_embd.weight", Derivation::dequant_gguf) == 1);
  CHECK(count(*plan, "blk.0.attn_q.weight", Derivation::dequant_gguf) == 1);
  CHECK(count(*plan, "blk.0.attn_k.weight", Derivation::dequant_gguf) == 1);
  CHECK(count(*plan, "blk.0.ffn_up.weight", Derivation::transpose) == 1);
  CHECK(count(*plan, "blk.0.ffn_up.weight", Derivation::to_f16) == 0);
  CHECK(count(*plan, "blk.0.ffn_down.weight", Derivation::transpose) == 1);
  CHECK(count(*plan, "blk.0.ffn_down.weight", Derivation::to_f16) == 1);
  CHECK(count(*plan, "blk.0.ffn_gate_exps.weight", Derivation::dequant_gguf) == 1);
  CHECK(count(*plan, "output.weight", Derivation::quant_int8) == 1);
  CHECK(count(*plan, "token_embd.weight", Derivation::quant_int8) == 0);  // not tied: output.weight exists
  CHECK(plan->size() == 8);

  const PlannedDerivation& q = find(*plan, "blk.0.attn_q.weight", Derivation::dequant_gguf);
  CHECK(q.launch.src_type == DataType::q4_k);
  CHECK(q.launch.rows == 2);
  CHECK(q.launch.cols == 256);
  CHECK(q.why.find("rule gguf-layers") != std::string::npos);
  // Rank 3: every dim but ne[0] is a row.
  const PlannedDerivation& e = find(*plan, "blk.0.ffn_gate_exps.weight", Derivation::dequant_gguf);
  CHECK(e.launch.rows == 6);
  CHECK(e.launch.cols == 32);
  CHECK(e.why.find("rule gguf-experts") != std::string::npos);
}

TEST_CASE("GGUF: an unsupported block type is a listed skip by name; block types refuse the dense kinds") {
  ScratchDir dir("gguf-plan-refusals");
  std::vector<Tensor> t = kLlama;
  t.push_back({"blk.1.attn_q.weight", {256, 1}, kIQ2_XXS, 66});
  t.push_back({"blk.1.attn_norm.weight", {4}, kF64, 32});
  auto m = open_model(dir.write("m.gguf", file_of(t)));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());

  // The built-in rules: a listed skip, or an error when nobody listens.
  std::vector<PlanSkip> skipped;
  PlanOptions o;
  o.skipped = &skipped;
  auto plan = plan_derivations(*m, o);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0].weight == "blk.1.attn_q.weight");
  CHECK(skipped[0].rule == "gguf-unsupported");
  CHECK(skipped[0].reason.find("iq2_xxs") != std::string::npos);
  auto quiet = plan_derivations(*m);
  REQUIRE_FALSE(quiet.ok());
  CHECK(quiet.error().message.find("iq2_xxs") != std::string::npos);

  // The embedding and head of an unsupported type are listed skips too.
  auto iq_ends = open_model(dir.write("ends.gguf", file_of({{"token_embd.weight", {256, 1}, kIQ2_XXS, 66},
                                                            {"output.weight", {256, 1}, kIQ2_XXS, 66}})));
  REQUIRE_MESSAGE(iq_ends.ok(), iq_ends.error().to_string());
  std::vector<PlanSkip> ends_skipped;
  PlanOptions ends_options;
  ends_options.skipped = &ends_skipped;
  REQUIRE(plan_derivations(*iq_ends, ends_options).ok());
  REQUIRE(ends_skipped.size() == 2);
  for (const PlanSkip& s : ends_skipped) {
    CHECK(s.rule == "gguf-unsupported-head");
    CHECK(s.reason.find("iq2_xxs") != std::string::npos);
  }

  auto iq = plan_derivation(*m, "blk.1.attn_q.weight", Derivation::dequant_gguf_f32);
  REQUIRE_FALSE(iq.ok());
  CHECK(iq.code() == ErrorCode::unsupported);
  CHECK(iq.error().message.find("iq2_xxs blocks: not supported by derivations") != std::string::npos);
  auto f64 = plan_derivation(*m, "blk.1.attn_norm.weight", Derivation::dequant_gguf);
  REQUIRE_FALSE(f64.ok());
  CHECK(f64.code() == ErrorCode::invalid_argument);
  CHECK(f64.error().message.find("double: not a GGUF tensor type") != std::string::npos);
  auto dense = plan_derivation(*m, "blk.0.attn_q.weight", Derivation::transpose);
  REQUIRE_FALSE(dense.ok());
  CHECK(dense.error().message.find("q4_k blocks are read by dequant_gguf") != std::string::npos);
  auto f32 = plan_derivation(*m, "blk.0.attn_q.weight", Derivation::dequant_gguf_f32);
  REQUIRE_MESSAGE(f32.ok(), f32.error().to_string());
  CHECK(f32->launch.kind == Derivation::dequant_gguf_f32);

  // Q8_0's per-32 scales are not quant_int8's per-row one: refused with the reason.
  auto q8 = plan_derivation(*m, "token_embd.weight", Derivation::quant_int8);
  REQUIRE_FALSE(q8.ok());
  CHECK(q8.code() == ErrorCode::unsupported);
  CHECK(q8.error().message.find("one scale per row and q8_0 one per 32 elements") != std::string::npos);
  // repack_gguf_int4 reads Q4_0 and Q4_1 only.
  auto repack_k = plan_derivation(*m, "blk.0.attn_q.weight", Derivation::repack_gguf_int4);
  REQUIRE_FALSE(repack_k.ok());
  CHECK(repack_k.code() == ErrorCode::unsupported);
  CHECK(repack_k.error().message.find("q4_0 or q4_1, not q4_k") != std::string::npos);
  auto repack = plan_derivation(*m, "blk.0.ffn_gate_exps.weight", Derivation::repack_gguf_int4);
  REQUIRE_MESSAGE(repack.ok(), repack.error().to_string());
  CHECK(repack->launch.rows == 6);
  CHECK(repack->launch.cols == 32);

  // A rules file's rule on GGUF names, with a GGUF kind.
  PlanOptions given;
  given.rules = {{"heads", "output.weight", {Derivation::dequant_gguf_f32}, {}, "", ""}};
  auto by_rule = plan_derivations(*m, given);
  REQUIRE_MESSAGE(by_rule.ok(), by_rule.error().to_string());
  REQUIRE(by_rule->size() == 1);
  CHECK(by_rule->front().launch.src_type == DataType::float32);
}

TEST_CASE(
    "GGUF: one byte range read as two block types is two memo keys and two residency identities; derive refuses the "
    "retyped entry") {
  ScratchDir dir("gguf-plan-alias");
  // 180 bytes: ten q4_0 blocks (320 elements) or nine q4_1 blocks (288).
  auto m = open_model(dir.write("m.gguf", file_of({{"blk.0.attn_q.weight", {320}, kQ4_0, 180}})));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto as_q4_0 = plan_derivation(*m, "blk.0.attn_q.weight", Derivation::dequant_gguf_f32);
  REQUIRE_MESSAGE(as_q4_0.ok(), as_q4_0.error().to_string());
  PlannedDerivation as_q4_1 = *as_q4_0;
  as_q4_1.launch.src_type = DataType::q4_1;
  as_q4_1.launch.cols = 288;
  REQUIRE(derivation_sizes(as_q4_1.launch)->src_bytes == 180);

  CHECK(identity::of_derivation(m->store(), *as_q4_0) != identity::of_derivation(m->store(), as_q4_1));

  // The memo keys the two launches apart on one source pointer.
  DerivationLaunch l0 = as_q4_0->launch, l1 = as_q4_1.launch;
  l0.src = l1.src = 0x1000;
  CHECK_FALSE(DerivationKey::of(l0) == DerivationKey::of(l1));

  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  {
    DeviceWeights sources(**gpu, m->store());
    DerivedWeights memo;
    TeardownHost<GpuBackend> host(**gpu);
    host.add(sources);
    host.add(memo);
    const DeriveContext ctx{**gpu, *m, sources, memo};
    // Through derive, an entry that reads the q4_0 tensor as q4_1 is an
    // edited one: refused (check_planned), never a value of other bytes.
    const std::vector<PlannedDerivation> plan = {*as_q4_0, as_q4_1};
    auto refused = derive_weights(ctx, plan);
    REQUIRE(refused.code() == ErrorCode::invalid_argument);
    CHECK_MESSAGE(refused.error().to_string().find("is q4_0, the launch reads q4_1") != std::string::npos,
                  refused.error().to_string());
    CHECK(memo.is_empty());
    auto value = derive_weight(ctx, *as_q4_0);
    REQUIRE_MESSAGE(value.ok(), value.error().to_string());
    CHECK(value->key.src_type == DataType::q4_0);
    CHECK(memo.len() == 1);
    CHECK(host.teardown(**gpu).ok());
  }
}

TEST_CASE("GGUF on the cpu backend: a file truncated while open is an io error naming it, not SIGBUS") {
  ScratchDir dir("gguf-plan-truncated");
  // Two Q8_0 tensors, both read in place from the file's mapping.
  const auto path = dir.write("m.gguf", file_of({{"blk.0.attn_q.weight", {32, 4}, kQ8_0, 4 * 34},
                                                 {"blk.0.attn_k.weight", {32, 4}, kQ8_0, 4 * 34}}));
  const auto size = std::filesystem::file_size(path);
  auto m = open_model(path);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const auto baseline = (*gpu)->counters();
  {
    DeviceWeights sources(**gpu, m->store());
    DerivedWeights memo;
    TeardownHost<GpuBackend> host(**gpu);
    host.add(sources);
    host.add(memo);
    const DeriveContext ctx{**gpu, *m, sources, memo};
    REQUIRE(derive_weight(ctx, "blk.0.attn_q.weight", Derivation::dequant_gguf).ok());

    std::filesystem::resize_file(path, 0);
    auto after = derive_weight(ctx, "blk.0.attn_k.weight", Derivation::dequant_gguf_f32);
    REQUIRE_FALSE(after.ok());
    CHECK(after.code() == ErrorCode::io);
    const std::string changed = path.string() + " changed since it was opened (size " + std::to_string(size) + ", now 0)";
    CHECK_MESSAGE(after.error().to_string().find(changed) != std::string::npos, after.error().to_string());
    CHECK(after.error().to_string().find("'blk.0.attn_k.weight'") != std::string::npos);
    CHECK(memo.len() == 1);  // the value made before the change; nothing since
    const auto report = host.teardown(**gpu);
    CHECK_MESSAGE(report.ok(), report.to_string());
  }
  CHECK((*gpu)->counters().live_allocations == baseline.live_allocations);
}

TEST_CASE(
    "GGUF: a pair derived from a tensor with no rows tears down cleanly (its empty second output is no allocation)") {
  ScratchDir dir("gguf-plan-no-rows");
  // ne = [32, 0]: a Q4_0 tensor of zero rows, zero bytes.
  auto m = open_model(dir.write("m.gguf", file_of({{"blk.0.attn_q.weight", {32, 0}, kQ4_0, 0}})));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const auto baseline = (*gpu)->counters();
  {
    DeviceWeights sources(**gpu, m->store());
    DerivedWeights memo;
    TeardownHost<GpuBackend> host(**gpu);
    host.add(sources);
    host.add(memo);
    const DeriveContext ctx{**gpu, *m, sources, memo};
    auto pair = derive_weight(ctx, "blk.0.attn_q.weight", Derivation::repack_gguf_int4);
    REQUIRE_MESSAGE(pair.ok(), pair.error().to_string());
    CHECK(memo.len() == 1);
    const auto report = host.teardown(**gpu);
    CHECK_MESSAGE(report.ok(), report.to_string());
  }
  CHECK((*gpu)->counters().live_allocations == baseline.live_allocations);
}

TEST_CASE("slice: launches of one source that differ only in their columns are other memo keys and identities") {
  ScratchDir dir("slice-alias");
  auto m = open_model(dir.write("m.gguf", file_of({{"blk.0.attn_q.weight", {320}, kQ4_0, 180}})));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto base = plan_derivation(*m, "blk.0.attn_q.weight", Derivation::dequant_gguf_f32);
  REQUIRE(base.ok());
  // The 180 bytes as [10, 18] (one q4_0 block a row), sliced as rank shards would be.
  PlannedDerivation left = *base;
  left.launch = DerivationLaunch{};
  left.launch.kind = Derivation::slice;
  left.launch.src_type = DataType::uint8;
  left.launch.rows = 10;
  left.launch.src_cols = 18;
  left.launch.cols = 9;
  left.launch.col_offset = 0;
  REQUIRE(derivation_sizes(left.launch).ok());
  PlannedDerivation right = left;
  right.launch.col_offset = 9;
  PlannedDerivation other_stride = left;  // the same 180 bytes as [20, 9]
  other_stride.launch.rows = 20;
  other_stride.launch.src_cols = 9;
  REQUIRE(derivation_sizes(other_stride.launch)->src_bytes == 180);
  const auto id = [&](const PlannedDerivation& p) { return identity::of_derivation(m->store(), p); };
  CHECK(id(left) != id(right));
  CHECK(id(left) != id(other_stride));
  CHECK(id(left) == id(PlannedDerivation(left)));
  CHECK_FALSE(DerivationKey::of(left.launch) == DerivationKey::of(right.launch));
  CHECK_FALSE(DerivationKey::of(left.launch) == DerivationKey::of(other_stride.launch));
  // Columns past the source's row are refused by the layout, by field.
  PlannedDerivation past = left;
  past.launch.col_offset = 10;
  auto refused = derivation_sizes(past.launch);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.code() == ErrorCode::invalid_argument);
  CHECK(refused.error().to_string().find("pass the source's 18") != std::string::npos);
  // A slice is not planned from a weight's name or a rule: its columns come from a shard plan.
  auto by_name = plan_derivation(*m, "blk.0.attn_q.weight", Derivation::slice);
  REQUIRE_FALSE(by_name.ok());
  CHECK(by_name.error().to_string().find("gather_launch") != std::string::npos);
  PlanOptions given;
  given.rules = {{"shards", "blk.*", {Derivation::slice}, {}, "", ""}};
  auto by_rule = plan_derivations(*m, given);
  REQUIRE_FALSE(by_rule.ok());
  CHECK(by_rule.error().to_string().find("derivation rule 'shards': slice gathers") != std::string::npos);
}
