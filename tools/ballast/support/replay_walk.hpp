// The walk `ballast replay` repeats once per token, shaped like an engine's
// decode loop: the graph's nodes in order, and for each node the weights it
// reads (derived or as stored). Also the prefetch window and the physical
// anchor (a plain memcpy out of the model's mapped files) it is compared to.
#pragma once

#include <ballast/derive.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ballast::cli {

// --derived: which value of a weight a step pins.
enum class DerivedMode {
  first,  // the first derivation planned for that consumer
  all,    // every derivation planned for that consumer, one step each
  none,   // the source weight itself
};

struct WalkStep {
  std::string label;  // "<node>: <kind> of <weight>" or "<node>: <weight>"
  bool derived = false;
  PlannedDerivation planned;  // derived steps
  ValueId weight{};           // source steps
  std::uint64_t first_bytes = 0;   // what ptr() addresses: the value or weight, or a pair's first half
  std::uint64_t second_bytes = 0;  // what second() addresses (pairs only)
  std::size_t entry = 0;           // index into Walk::entry_bytes
  std::uint64_t bytes() const noexcept { return first_bytes + second_bytes; }
};

struct Walk {
  std::vector<WalkStep> steps;
  // One per distinct value the steps pin, told apart as the residency
  // tells its entries apart: by where the bytes are, never by name (a
  // derivation with the same operand bytes and parameters, or a source
  // weight on the same byte range, tied names included, is one entry).
  std::vector<std::uint64_t> entry_bytes;
  std::uint64_t touched_bytes = 0;  // sum of entry_bytes: what one token touches
  std::uint64_t largest_entry = 0;
  // The source weights the walk reads (pinned ones, and the operands of
  // derived ones), each byte range once (tied names: the first), in walk
  // order, and their bytes.
  std::vector<ValueId> sources;
  std::uint64_t source_bytes = 0;
};

// For a model with a graph: for each node in graph order, for each
// distinct input that is a stored weight: with `first`/`all`, the derivation(s) planned for that node with
// that weight as their source, one step each; an input that is only an
// operand of those derivations (MatMulNBits scales and zero points) needs no
// step of its own; any other weight input (a bias, a weight nothing is
// derived from) is pinned as a source. With `none`, every weight input is a
// source step. For a model without a graph (safetensors, GGUF): each
// weight in the order the file lists them, with the derivations
// `planning`'s rules (the built-in ones when it has none) plan for it, one
// step for `first`, one each for `all`; a weight they plan nothing for, and
// every weight with `none`, is a source step. Errors: plan_derivations()'s
// (a node that does not fit its operator), or a planned launch
// derivation_sizes() refuses.
Result<Walk> build_walk(const Model& model, DerivedMode mode, const PlanOptions& planning = {});

// The prefetch window before step `next - 1` is pinned: steps [next, end)
// of the walk repeated (step g is walk.steps[g % n]), never past `limit`
// (the last step of the run) nor more than one token of steps, whose bytes
// sum to at most max(bytes of step `next`, window_bytes). Returns `end`
// (== next when next >= limit).
std::size_t prefetch_window_end(const Walk& walk, std::size_t next, std::size_t limit, std::uint64_t window_bytes);

// The physical anchor: `bytes` of fresh anonymous memory (mmap), filled by
// memcpy from the bytes of `weights` in the model's mapped files (cycling
// through them when they hold less), timed from the mmap to the last copy.
struct Anchor {
  std::uint64_t bytes = 0;
  double seconds = 0;
  double bytes_per_second() const noexcept { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0; }
};
Result<Anchor> measure_anchor(const WeightStore& store, std::span<const ValueId> weights, std::uint64_t bytes);

}  // namespace ballast::cli
