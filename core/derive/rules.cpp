// Planning from rules: weight-name patterns -> derivations of the weight as
// stored (docs/derivations.md, "Rules").
#include "derive/rules.hpp"

#include "derive/name_pattern.hpp"

#include <ballast/dtype.hpp>

#include <algorithm>

namespace ballast {

std::vector<DerivationRule> default_derivation_rules() {
  using D = Derivation;
  // A Linear weight is stored [out, in] = [N, K]: transpose gives the [K, N]
  // a MatMul reads, quant_int8 of the stored rows is per output channel.
  const std::vector<DataType> f32 = {DataType::float32};
  const std::vector<DataType> f32_f16 = {DataType::float32, DataType::float16};
  // to_f16 reads float32 and bfloat16 (a Hugging Face checkpoint's usual type).
  const std::vector<DataType> f32_bf16 = {DataType::float32, DataType::bfloat16};
  const std::vector<DataType> bf16 = {DataType::bfloat16};
  const std::string attention = "model.layers.*.self_attn.{q,k,v,o}_proj.weight";
  const std::string mlp = "model.layers.*.mlp.{gate,up,down}_proj.weight";
  // GGUF's llama-family names (ne[0] = K innermost, so a weight is [N, K]
  // as stored, like a Linear's): block-quantized (and bf16) tensors are
  // dequantized to f16; plain float ones get what the Hugging Face names get.
  const std::vector<DataType> blocks = {DataType::bfloat16, DataType::q4_0, DataType::q4_1, DataType::q5_0, DataType::q5_1,
                                        DataType::q8_0, DataType::q2_k, DataType::q3_k, DataType::q4_k,
                                        DataType::q5_k, DataType::q6_k, DataType::q8_k};
  // Block types GGUF has that no kind reads: matched so the plan lists them.
  const std::vector<DataType> unsupported = {DataType::q8_1,  DataType::iq2_xxs, DataType::iq2_xs, DataType::iq3_xxs,
                                             DataType::iq1_s, DataType::iq4_nl,  DataType::iq3_s,  DataType::iq2_s,
                                             DataType::iq4_xs, DataType::iq1_m,  DataType::tq1_0,  DataType::tq2_0,
                                             DataType::mxfp4};
  const std::string gguf_layers = "blk.*.{attn_q,attn_k,attn_v,attn_output,attn_qkv,ffn_gate,ffn_up,ffn_down}.weight";
  const std::string gguf_experts = "blk.*.{ffn_gate_exps,ffn_up_exps,ffn_down_exps}.weight";
  return {
      {"gguf-layers", gguf_layers, {D::dequant_gguf}, blocks, "", ""},
      {"gguf-layers-plain", gguf_layers, {D::transpose}, f32_f16, "", ""},
      {"gguf-layers-f16", gguf_layers, {D::to_f16}, f32, "", ""},
      {"gguf-experts", gguf_experts, {D::dequant_gguf}, blocks, "", ""},
      {"gguf-unsupported",
       gguf_layers,
       {},
       unsupported,
       "",
       "a GGUF block type derivations do not read (docs/derivations.md lists the ones they do)"},
      {"gguf-unsupported-experts",
       gguf_experts,
       {},
       unsupported,
       "",
       "a GGUF block type derivations do not read (docs/derivations.md lists the ones they do)"},
      // The embedding and head too: a model quantized to an IQ type keeps
      // them in one, and the plan says why they get nothing.
      {"gguf-unsupported-head",
       "{token_embd,output}.weight",
       {},
       unsupported,
       "",
       "a GGUF block type derivations do not read (docs/derivations.md lists the ones they do)"},
      {"gguf-embedding", "token_embd.weight", {D::dequant_gguf}, blocks, "", ""},
      {"gguf-head", "output.weight", {D::dequant_gguf}, blocks, "", ""},
      {"gguf-head-int8", "output.weight", {D::quant_int8}, f32_f16, "", ""},
      {"gguf-tied-head", "token_embd.weight", {D::quant_int8}, f32_f16, "output.weight", ""},
      {"hf-attention", attention, {D::transpose}, {}, "", ""},
      {"hf-attention-f16", attention, {D::to_f16}, f32_bf16, "", ""},
      {"hf-mlp", mlp, {D::transpose}, {}, "", ""},
      {"hf-mlp-f16", mlp, {D::to_f16}, f32_bf16, "", ""},
      {"hf-lm-head", "lm_head.weight", {D::quant_int8}, f32_f16, "", ""},
      {"hf-tied-head", "model.embed_tokens.weight", {D::quant_int8}, f32_f16, "lm_head.weight", ""},
      // quant_int8 reads float32 and float16: a bfloat16 checkpoint's head
      // gets the f16 copy its layers get, so no head goes unplanned.
      {"hf-lm-head-f16", "lm_head.weight", {D::to_f16}, bf16, "", ""},
      {"hf-tied-head-f16", "model.embed_tokens.weight", {D::to_f16}, bf16, "lm_head.weight", ""},
      // GPTQ packs 8 K-values per int32 down a column ([K/8, N]); AWQ packs 8
      // N-values per int32 in the order 0,2,4,6,1,3,5,7 ([K, N/8]). The int4
      // kinds read MatMulNBits' layout (per output row, K packed two per
      // byte within each block): neither is that layout as stored.
      {"packed-int4",
       "*.qweight",
       {},
       {DataType::int32},
       "",
       "a GPTQ/AWQ packed-int4 weight: its layout (int32 words packing 8 values along K, or along N in AWQ's order) "
       "is not MatMulNBits' (uint8, two values per byte along K per output row), so the int4 derivations cannot read "
       "it as stored"},
  };
}

namespace derive {

Status plan_rules(const Model& model, std::span<const DerivationRule> rules, bool defaults,
                  std::vector<PlannedDerivation>& out, std::vector<PlanSkip>& skipped) {
  std::vector<NamePattern> patterns;
  patterns.reserve(rules.size());
  for (const DerivationRule& r : rules) {
    auto compiled = NamePattern::compile(r.pattern);
    if (!compiled) return std::move(compiled.error()).with_context("derivation rule '" + r.name + "'");
    for (Derivation d : r.derivations) {
      if (derivation_kind(d).blocked)
        return make_error(ErrorCode::invalid_argument,
                          "derivation rule '" + r.name + "': " + std::string(derivation_name(d)) +
                              " is planned from a graph (it needs scales), not from a weight's name");
      // Its maxima come from the ranks of a tensor-parallel load, not from a file.
      if (d == Derivation::quant_int8_given_max)
        return make_error(ErrorCode::invalid_argument,
                          "derivation rule '" + r.name + "': quant_int8_given_max takes its rows' maxima from the "
                          "ranks of a sharded derive (plan_shard_derivations); a rule asks for quant_int8");
      // Its columns come from a shard plan, not from a file.
      if (d == Derivation::slice)
        return make_error(ErrorCode::invalid_argument,
                          "derivation rule '" + r.name + "': slice gathers a rank's strided shard, whose columns "
                          "come from a shard plan (gather_launch), not from a rule");
    }
    patterns.push_back(std::move(*compiled));
  }
  std::vector<bool> matched(rules.size(), false);
  for (ValueId id : model.weight_order()) {
    const std::string_view name = model.value_name(id);
    // The weight by the id in hand (no second lookup of its name per rule).
    const auto found = model.store().weights().find(id);
    const WeightRef* w = found == model.store().weights().end() ? nullptr : &found->second;
    for (std::size_t i = 0; i < rules.size(); ++i) {
      const DerivationRule& r = rules[i];
      if (!patterns[i].matches(name)) continue;
      if (!r.unless_present.empty() && model.weight(r.unless_present) != nullptr) continue;
      if (!r.dtypes.empty() && (w == nullptr || std::find(r.dtypes.begin(), r.dtypes.end(), w->dtype) == r.dtypes.end()))
        continue;
      matched[i] = true;
      if (!r.refuse.empty()) {
        // A GGUF block type the rule lists as unsupported: say which.
        const bool block = w != nullptr && dtype_block(w->dtype).has_value();
        skipped.push_back({r.name, std::string(name), (block ? std::string(dtype_name(w->dtype)) + ": " : "") + r.refuse});
        continue;
      }
      for (Derivation d : r.derivations) {
        auto planned = plan_derivation(model, name, d);
        if (!planned) {
          skipped.push_back({r.name, std::string(name), std::string(derivation_name(d)) + ": " + planned.error().message});
          continue;
        }
        planned->why = "rule " + r.name + " (" + r.pattern + "): " + planned->why;
        out.push_back(std::move(*planned));
      }
    }
  }
  if (!defaults)
    for (std::size_t i = 0; i < rules.size(); ++i)
      if (!matched[i]) skipped.push_back({rules[i].name, "", "the pattern '" + rules[i].pattern + "' matches no weight" + (rules[i].dtypes.empty() ? "" : " of its types")});
  return {};
}

}  // namespace derive
}  // namespace ballast
