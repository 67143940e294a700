// The split names and the built-in shard rules (docs/distributed.md, "Rules").
#include <ballast/shard.hpp>

namespace ballast {

std::string_view shard_split_name(ShardSplit split) noexcept {
  switch (split) {
    case ShardSplit::replicated: return "replicated";
    case ShardSplit::column: return "column";
    case ShardSplit::row: return "row";
    case ShardSplit::vocab: return "vocab";
  }
  return "?";
}

std::optional<ShardSplit> shard_split_from_name(std::string_view name) noexcept {
  for (ShardSplit s : {ShardSplit::replicated, ShardSplit::column, ShardSplit::row, ShardSplit::vocab})
    if (shard_split_name(s) == name) return s;
  return std::nullopt;
}

std::vector<ShardRule> default_shard_rules() {
  using S = ShardSplit;
  // First match wins, so the order matters only where patterns overlap;
  // they do not here. `.qweight` is a MatMulNBits B in ONNX (the llm test
  // model's mlp.gate_proj.qweight); a GPTQ/AWQ qweight without such a node
  // is refused by the plan, not guessed at.
  return {
      // Hugging Face decoders (and ONNX exports keeping their names).
      {"hf-column", "*.{q_proj,k_proj,v_proj,gate_proj,up_proj}.{weight,qweight,bias}", S::column, {}, 0},
      {"hf-gate-up", "*.gate_up_proj.{weight,qweight,bias}", S::column, {}, 2},
      {"hf-row", "*.{o_proj,down_proj}.{weight,qweight}", S::row, {}, 0},
      // A row layer's bias is added once, after the all-reduce: every rank keeps it whole.
      {"hf-row-bias", "*.{o_proj,down_proj}.bias", S::replicated, {}, 0},
      {"hf-embedding", "*embed_tokens.weight", S::vocab, {}, 0},
      {"hf-lm-head", "lm_head.{weight,qweight}", S::vocab, {}, 0},
      // GGUF llama names.
      {"gguf-column", "blk.*.{attn_q,attn_k,attn_v,ffn_gate,ffn_up,ffn_gate_exps,ffn_up_exps}.{weight,bias}", S::column,
       {}, 0},
      {"gguf-row", "blk.*.{attn_output,ffn_down,ffn_down_exps}.weight", S::row, {}, 0},
      {"gguf-row-bias", "blk.*.{attn_output,ffn_down}.bias", S::replicated, {}, 0},
      {"gguf-vocab", "{token_embd,output}.weight", S::vocab, {}, 0},
      // Both namings: norms are per feature of the whole hidden state.
      {"norms", "*norm.{weight,bias}", S::replicated, {}, 0},
  };
}

}  // namespace ballast
