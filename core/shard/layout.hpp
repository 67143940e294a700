// Which stored axis of a weight is "output" and which "input": from the
// node that consumes it (ONNX), else from the format's convention
// (safetensors' and GGUF's [..., out, in]). The crux of sharding: the same
// name is a different axis in different formats (docs/distributed.md).
#pragma once

#include <ballast/model.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ballast::shard {

// A name in error text: 'name'.
inline std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

// A MatMulNBits node's shape, which B, its scales and its zero points share.
struct NbitsShape {
  std::uint64_t k = 0, n = 0, block_size = 0, k_blocks = 0;
  std::int64_t bits = 4;
  std::string node;
  ValueId b{};  // the B its scales and zero points follow
};

enum class Role : std::uint8_t {
  plain,         // a dense weight: out_axis / in_axis of its stored dims
  nbits_b,       // MatMulNBits B: [N, k_blocks, blob]
  nbits_scales,  // [N, k_blocks] of the scales' type
  nbits_zero_points,  // [N, ceil(k_blocks / 2)] uint8 packed, or [N, k_blocks]
};

struct Layout {
  Role role = Role::plain;
  int out_axis = 0;   // plain: the output (or vocabulary) axis
  int in_axis = -1;   // plain: the input axis; -1 for a 1-D weight
  std::string text;   // e.g. "MatMul B [K, N] of node 'lm_head'"
  std::optional<NbitsShape> nbits;
  // Two consumers that read the weight with different layouts: an error
  // when the weight is split (a replicated weight needs no layout).
  std::string conflict;
};

// The graph's consumers of every weight, read once per plan.
class Consumers {
 public:
  explicit Consumers(const Model& model);
  // The layout of weight `id` (dims `w`): its consumer's, else the format's.
  Layout layout_of(ValueId id, const WeightRef& w) const;

 private:
  void note(ValueId id, Layout layout);
  const Model& model_;
  std::unordered_map<ValueId, Layout> by_weight_;
};

}  // namespace ballast::shard
