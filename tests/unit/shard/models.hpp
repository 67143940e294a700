// Small models of each format for the shard tests, written byte by byte
// (the format writers of tests/unit), with every shape chosen so that each
// kind of split lands on a known offset.
#pragma once

#include <ballast/model.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/shard.hpp>

#include "unit/gguf/writer.hpp"
#include "unit/onnx/proto_builder.hpp"
#include "unit/safetensors/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ballast::testing {

// ---- safetensors: a Hugging Face decoder layer (hidden 8, vocab 16, ffn 12).
inline std::vector<StTensor> hf_tensors() {
  auto t = [](std::string name, std::string dtype, std::vector<std::uint64_t> shape, std::size_t element) {
    std::size_t n = element;
    for (auto d : shape) n *= d;
    return StTensor{std::move(name), std::move(dtype), std::move(shape), pattern(n)};
  };
  const std::string l = "model.layers.0.";
  return {
      t("model.embed_tokens.weight", "F32", {16, 8}, 4),
      t(l + "self_attn.q_proj.weight", "F16", {8, 8}, 2),
      t(l + "self_attn.q_proj.bias", "F32", {8}, 4),
      t(l + "self_attn.k_proj.weight", "F16", {4, 8}, 2),
      t(l + "self_attn.v_proj.weight", "F16", {4, 8}, 2),
      t(l + "self_attn.o_proj.weight", "F16", {8, 8}, 2),
      t(l + "self_attn.o_proj.bias", "F32", {8}, 4),
      t(l + "self_attn.qkv_proj.weight", "F16", {16, 8}, 2),  // fused q 8, k 4, v 4: a rule gives the parts
      t(l + "mlp.gate_up_proj.weight", "F16", {24, 8}, 2),    // gate 12, up 12: two equal parts by default
      t(l + "mlp.down_proj.weight", "F16", {8, 12}, 2),
      t(l + "input_layernorm.weight", "F32", {8}, 4),
      t("model.norm.weight", "F32", {8}, 4),
      t("lm_head.weight", "F16", {16, 8}, 2),
  };
}

// ---- GGUF llama names. ne is innermost first (ne[0] = in).
struct GgufTensor {
  std::string name;
  std::vector<std::uint64_t> ne;
  std::uint32_t type;
  std::size_t bytes;
};
inline constexpr std::uint32_t kGgufQ4_0 = 2;

inline std::vector<std::uint8_t> gguf_of(const std::vector<GgufTensor>& tensors) {
  std::vector<GgufBytes> infos;
  std::size_t at = 0;
  for (const GgufTensor& t : tensors) {
    infos.push_back(tinfo(t.name, t.ne, t.type, at));
    at = (at + t.bytes + 31) / 32 * 32;
  }
  return gguf_file({kv_str("general.architecture", "llama")}, infos, at);
}

inline std::vector<GgufTensor> gguf_llama() {
  return {
      {"token_embd.weight", {32, 4}, kQ8_0, 4 * 34},        // vocab 4 x hidden 32
      {"blk.0.attn_q.weight", {8, 4}, kF32, 4 * 8 * 4},     // [out 4, in 8]
      {"blk.0.attn_output.weight", {8, 4}, kF16, 4 * 8 * 2},
      {"blk.0.ffn_down.weight", {64, 2}, kGgufQ4_0, 2 * 2 * 18},  // [out 2, in 64]: 2 blocks per row
      {"blk.0.attn_norm.weight", {8}, kF32, 32},
      {"blk.0.ffn_gate_exps.weight", {32, 4, 2}, kF32, 2 * 4 * 32 * 4},  // 2 experts of [out 4, in 32]
      {"output.weight", {8, 4}, kF16, 4 * 8 * 2},
  };
}

// ---- ONNX with external data, named as tools/gen/make_llm_model.py names.
inline Proto onnx_tensor(std::string_view name, int dtype, const std::vector<std::uint64_t>& dims,
                         std::uint64_t offset, std::uint64_t length) {
  Proto t;
  t.packed_u64(1, dims);
  t.varint(2, static_cast<std::uint64_t>(dtype));
  t.str(8, name);
  for (auto [k, v] : {std::pair<std::string, std::string>{"location", "llm.weights"},
                      {"offset", std::to_string(offset)},
                      {"length", std::to_string(length)}}) {
    Proto e;
    e.str(1, k).str(2, v);
    t.msg(13, e);
  }
  return t.varint(14, 1);
}

struct OnnxWriter {
  std::vector<Proto> initializers, nodes;
  std::vector<std::uint8_t> blob;
  // A tensor in the blob at the next 64-byte boundary.
  std::string add(std::string name, int dtype, std::vector<std::uint64_t> dims, std::size_t bytes) {
    while (blob.size() % 64 != 0) blob.push_back(0);
    const std::size_t at = blob.size();
    for (std::size_t i = 0; i < bytes; ++i) blob.push_back(static_cast<std::uint8_t>((at + i) * 13 + 5));
    initializers.push_back(onnx_tensor(name, dtype, dims, at, bytes));
    return name;
  }
  // An inline tensor (raw_data in the .onnx): every byte 3, or with
  // `patterned` each its own (where a test must tell bytes apart).
  std::string add_inline(std::string name, int dtype, std::vector<std::uint64_t> dims, std::size_t bytes,
                         bool patterned = false) {
    Proto t;
    t.packed_u64(1, dims);
    t.varint(2, static_cast<std::uint64_t>(dtype));
    t.str(8, name);
    std::vector<std::uint8_t> raw(bytes, 3);
    if (patterned)
      for (std::size_t i = 0; i < bytes; ++i) raw[i] = static_cast<std::uint8_t>(i * 29 + 7);
    t.bytes(9, raw);
    initializers.push_back(t);
    return name;
  }
  // A tensor over bytes another tensor holds (an alias).
  void alias(std::string name, int dtype, std::vector<std::uint64_t> dims, std::uint64_t offset, std::uint64_t bytes) {
    initializers.push_back(onnx_tensor(name, dtype, dims, offset, bytes));
  }
  Result<Model> write(const ScratchDir& dir) const {
    Proto g;
    for (const Proto& n : nodes) g.msg(1, n);
    g.str(2, "g");
    for (const Proto& t : initializers) g.msg(5, t);
    Proto ai, ms;
    ai.str(1, "").varint(2, 17);
    ms.str(1, "com.microsoft").varint(2, 1);
    Proto m;
    m.varint(1, 8).str(2, "ballast-test").msg(8, ai).msg(8, ms).msg(7, g);
    dir.write("llm.weights", blob);
    return open_model(dir.write("llm.onnx", m.data));
  }
};

inline constexpr int kFloat = 1, kUint8 = 2, kFloat16 = 10;

// MatMulNBits with K=64, N=4, block 16 (k_blocks 4, 8-byte blobs).
inline void add_nbits(OnnxWriter& w, const std::string& prefix, bool zero_points, int scale_type,
                      std::uint64_t k = 64, std::uint64_t n = 4, std::uint64_t block = 16) {
  using namespace onnx_proto;
  const std::uint64_t kb = (k + block - 1) / block;
  const std::string b = w.add(prefix + ".qweight", kUint8, {n, kb, block / 2}, n * kb * block / 2);
  const std::string s = w.add(prefix + ".scales", scale_type, {n * kb}, n * kb * (scale_type == kFloat ? 4 : 2));
  std::string zp;
  if (zero_points) zp = w.add(prefix + ".zero_points", kUint8, {n * ((kb + 1) / 2)}, n * ((kb + 1) / 2));
  Proto node = zero_points
                   ? named_node(prefix, "MatMulNBits", {"x", b, s, zp}, {prefix + "_out"},
                                {attribute_int("K", static_cast<std::int64_t>(k)), attribute_int("N", static_cast<std::int64_t>(n)),
                                 attribute_int("bits", 4), attribute_int("block_size", static_cast<std::int64_t>(block))},
                                "com.microsoft")
                   : named_node(prefix, "MatMulNBits", {"x", b, s}, {prefix + "_out"},
                                {attribute_int("K", static_cast<std::int64_t>(k)), attribute_int("N", static_cast<std::int64_t>(n)),
                                 attribute_int("bits", 4), attribute_int("block_size", static_cast<std::int64_t>(block))},
                                "com.microsoft");
  w.nodes.push_back(node);
}

// The llm test model's shapes, small: hidden 8, ffn 64 (as K of down), vocab 16.
inline OnnxWriter llm_onnx() {
  using namespace onnx_proto;
  OnnxWriter w;
  w.add("embed_tokens.weight", kFloat, {16, 8}, 16 * 8 * 4);
  w.nodes.push_back(named_node("embed", "Gather", {"embed_tokens.weight", "ids"}, {"x"}));
  for (std::string proj : {"q", "k", "v", "o"}) {
    const std::string name = "layers.0.attn." + proj + "_proj.weight";
    w.add(name, kFloat16, {8, 8}, 8 * 8 * 2);  // MatMul B [K=8, N=8]
    w.nodes.push_back(named_node("layers.0.attn." + proj + "_proj", "MatMul", {"x", name}, {proj + "_out"}));
  }
  add_nbits(w, "layers.0.mlp.gate_proj", true, kFloat16);
  add_nbits(w, "layers.0.mlp.up_proj", true, kFloat16);
  add_nbits(w, "layers.0.mlp.down_proj", false, kFloat);
  w.add_inline("layers.0.norm.weight", kFloat, {8}, 32);
  w.add("lm_head.weight", kFloat, {8, 16}, 8 * 16 * 4);  // MatMul B [hidden 8, vocab 16]
  w.nodes.push_back(named_node("lm_head", "MatMul", {"x", "lm_head.weight"}, {"logits"}));
  return w;
}

// ---- Checks shared by the tests.

// A shard gathered straight from the weight's bytes on the host, ranges
// and strided rows in order: the reference for any gather.
inline std::vector<std::byte> gather(const Model& m, const WeightShard& s) {
  const WeightRef& w = m.store().weights().at(s.id);
  const Bytes bytes = *m.store().bytes(w);
  const std::uint64_t base = w.is_external() ? m.store().external_mmap_provenance(w)->offset : 0;
  std::vector<std::byte> out;
  for (const ByteRange& r : s.ranges) out.insert(out.end(), bytes.begin() + (r.offset - base), bytes.begin() + (r.offset - base + r.length));
  // A fused weight's strided parts lie side by side in each row: row i is
  // every part's row i, in part order (the shard's dims say [rows, columns]).
  const std::uint64_t rows = s.strided.empty() ? 0 : s.strided.front().rows;
  for (std::uint64_t row = 0; row < rows; ++row)
    for (const StridedView& v : s.strided) {
      REQUIRE(v.rows == rows);
      const std::uint64_t at = v.offset + row * v.row_stride - base;
      out.insert(out.end(), bytes.begin() + at, bytes.begin() + at + v.row_bytes);
    }
  return out;
}


inline const WeightShard& shard_of(const ShardPlan& plan, std::string_view weight) {
  auto it = std::find_if(plan.weights.begin(), plan.weights.end(), [&](const WeightShard& s) { return s.weight == weight; });
  REQUIRE_MESSAGE(it != plan.weights.end(), "no shard of " << weight);
  return *it;
}

// Every byte of every weight is in exactly one rank's shard (a split) or in
// every rank's (replicated); each rank's pieces add up to its device bytes.
inline void check_exact_cover(const Model& model, const ShardPlans& plans) {
  const std::uint32_t world = static_cast<std::uint32_t>(plans.ranks.size());
  for (std::size_t i = 0; i < plans.ranks.front().weights.size(); ++i) {
    const WeightShard& first = plans.ranks.front().weights[i];
    const WeightRef& w = model.store().weights().at(first.id);
    std::uint64_t base = 0;
    if (w.is_external()) base = model.store().external_mmap_provenance(w)->offset;
    std::vector<std::uint32_t> count(w.byte_length(), 0);
    for (const ShardPlan& plan : plans.ranks) {
      const WeightShard& s = plan.weights[i];
      REQUIRE(s.weight == first.weight);
      std::uint64_t mine = 0;
      auto mark = [&](std::uint64_t offset, std::uint64_t length) {
        REQUIRE(offset >= base);
        REQUIRE(offset - base + length <= w.byte_length());
        for (std::uint64_t b = 0; b < length; ++b) ++count[offset - base + b];
        mine += length;
      };
      for (const ByteRange& r : s.ranges) mark(r.offset, r.length);
      for (const StridedView& v : s.strided)
        for (std::uint64_t row = 0; row < v.rows; ++row) mark(v.offset + row * v.row_stride, v.row_bytes);
      CHECK_MESSAGE(mine == s.device_bytes, first.weight << " rank " << plan.rank);
    }
    const std::uint32_t want = first.split == ShardSplit::replicated || world == 1 ? world : 1;
    CHECK_MESSAGE(std::all_of(count.begin(), count.end(), [&](std::uint32_t c) { return c == want; }),
                  first.weight << ": every byte " << want << " time(s)");
  }
  std::uint64_t read = 0;
  for (const ShardPlan& plan : plans.ranks) {
    CHECK(plan.totals.read_bytes + plan.totals.not_needed_bytes == plan.model_bytes);
    read += plan.totals.read_bytes;
  }
  CHECK(read == plans.read_bytes_sum);
}

}  // namespace ballast::testing
