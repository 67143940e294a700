#include "support/replay_walk.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace ballast::cli {
namespace {

// What makes two steps the same value, as the residency they pin through
// keys its entries (docs/residency.md, "What an entry is"): where the
// bytes are, never which name reached them, so tied weights (two names on
// one byte range) are one value: (1, mapping, offset, length) in a mapped
// file, (2, address, length, 0) inline, (3, value index, 0, 0) otherwise.
using BytesId = std::tuple<int, std::uint64_t, std::uint64_t, std::uint64_t>;
BytesId bytes_id(const WeightStore& store, std::optional<ValueId> id) {
  if (!id) return {0, 0, 0, 0};
  auto it = store.weights().find(*id);
  if (it != store.weights().end()) {
    const WeightRef& w = it->second;
    if (!w.is_external()) return {2, reinterpret_cast<std::uintptr_t>(w.inline_bytes.data()), w.inline_bytes.size(), 0};
    if (auto p = store.external_mmap_provenance(w)) return {1, p->mapping, p->offset, p->length};
  }
  return {3, id->index, 0, 0};
}

// A derived step's value: its kind, its operands' bytes and every launch
// parameter (a slice's columns too), as the residency's entries.
auto identity(const WeightStore& store, const PlannedDerivation& p) {
  const DerivationLaunch& l = p.launch;
  return std::make_tuple(static_cast<int>(p.kind()), bytes_id(store, p.source), bytes_id(store, p.scales),
                         bytes_id(store, p.zero_points), p.of_transposed, l.rows, l.cols, l.block_size,
                         static_cast<int>(l.src_type), static_cast<int>(l.zero_points), l.src_cols, l.col_offset);
}

class WalkBuilder {
 public:
  explicit WalkBuilder(const Model& model) : model_(model) {}

  // `node` empty: a model without a graph (the label is the value's alone).
  Status add_derived(std::string_view node, const PlannedDerivation& p) {
    WalkStep s;
    s.label =
        (node.empty() ? "" : std::string(node) + ": ") + std::string(derivation_name(p.kind())) + " of " + p.weight;
    s.derived = true;
    s.planned = p;
    s.planned.launch.kind = p.kind();
    BALLAST_ASSIGN_OR_RETURN(DerivationSizes sizes, derivation_sizes(s.planned.launch), "sizing ",
                             derivation_name(p.kind()), " of ", p.weight);
    s.first_bytes = sizes.dst_bytes;
    s.second_bytes = sizes.dst2_bytes;
    const auto [it, fresh] = derived_.emplace(identity(model_.store(), p), walk_.entry_bytes.size());
    s.entry = it->second;
    if (fresh) add_entry(s.bytes());
    add_source(p.source);
    if (p.scales) add_source(*p.scales);
    if (p.zero_points) add_source(*p.zero_points);
    walk_.steps.push_back(std::move(s));
    return Status();
  }

  void add_source_step(std::string_view node, std::string_view name, ValueId id) {
    WalkStep s;
    s.label = (node.empty() ? "" : std::string(node) + ": ") + std::string(name);
    s.weight = id;
    s.first_bytes = model_.store().weights().at(id).byte_length();
    const auto [it, fresh] = pinned_sources_.emplace(bytes_id(model_.store(), id), walk_.entry_bytes.size());
    s.entry = it->second;
    if (fresh) add_entry(s.bytes());
    add_source(id);
    walk_.steps.push_back(std::move(s));
  }

  Walk take() { return std::move(walk_); }

 private:
  void add_entry(std::uint64_t bytes) {
    walk_.entry_bytes.push_back(bytes);
    walk_.touched_bytes += bytes;
    walk_.largest_entry = std::max(walk_.largest_entry, bytes);
  }

  void add_source(ValueId id) {
    if (!sources_seen_.insert(bytes_id(model_.store(), id)).second) return;  // tied names: one copy
    walk_.sources.push_back(id);
    walk_.source_bytes += model_.store().weights().at(id).byte_length();
  }

  const Model& model_;
  Walk walk_;
  std::map<decltype(identity(std::declval<const WeightStore&>(), PlannedDerivation{})), std::size_t> derived_;
  std::map<BytesId, std::size_t> pinned_sources_;
  std::set<BytesId> sources_seen_;
};

}  // namespace

namespace {

// A model without a graph (safetensors, GGUF): its weights in the order the
// file lists them (ValueId order), each with the derivations the rules plan
// for it, or pinned as stored when they plan none (a norm, a bias).
Result<Walk> build_rules_walk(const Model& model, DerivedMode mode, const PlanOptions& planning) {
  std::vector<PlanSkip> skipped;  // rules that match nothing are not the walk's concern
  PlanOptions options = planning;
  options.skipped = &skipped;
  BALLAST_ASSIGN_OR_RETURN(std::vector<PlannedDerivation> plan, plan_derivations(model, options));
  std::vector<ValueId> ids;
  for (const auto& [id, weight] : model.store().weights()) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  WalkBuilder b(model);
  for (ValueId id : ids) {
    bool covered = false;
    if (mode != DerivedMode::none)
      for (const PlannedDerivation& p : plan) {
        if (p.source != id || (covered && mode == DerivedMode::first)) continue;
        BALLAST_RETURN_IF_ERROR(b.add_derived("", p));
        covered = true;
      }
    if (!covered) b.add_source_step("", model.value_name(id), id);
  }
  return b.take();
}

}  // namespace

Result<Walk> build_walk(const Model& model, DerivedMode mode, const PlanOptions& planning) {
  if (model.nodes().empty()) return build_rules_walk(model, mode, planning);
  // Validates every node once: after this, plan_derivation() failing for a
  // node and kind only means the kind does not apply there.
  BALLAST_RETURN_IF_ERROR(plan_derivations(model));
  // plan_derivation() per kind, in enum order, gives a node's derivations in
  // the order plan_derivations() lists them (dense: transpose, to_f16,
  // quant_int8; MatMulNBits: dequant_int4, repack_int4), each with that
  // node's own parameters, also for a consumer whose entry the plan shares
  // with an earlier one.
  const std::vector<NodeInfo>& nodes = model.nodes();
  std::vector<std::vector<PlannedDerivation>> planned(nodes.size());
  // Weights a consumer reads through Identity or Transpose nodes (its
  // derivations are of the weight behind them): the engine runs the
  // consumer on the derived value, so those forwarding nodes pin nothing.
  std::set<ValueId> forwarded;
  if (mode != DerivedMode::none) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      for (int k = 0; k < kDerivationCount; ++k) {
        auto p = plan_derivation(model, nodes[i], static_cast<Derivation>(k));
        if (!p.ok()) continue;
        const bool direct = std::any_of(nodes[i].inputs.begin(), nodes[i].inputs.end(),
                                        [&](std::string_view in) { return model.value_id(in) == p->source; });
        if (!direct) forwarded.insert(p->source);
        planned[i].push_back(std::move(*p));
      }
    }
  }
  WalkBuilder b(model);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const NodeInfo& node = nodes[i];
    const std::vector<PlannedDerivation>& mine = planned[i];
    const bool forwarding = (node.op_type == "Identity" || node.op_type == "Transpose") &&
                            (node.domain.empty() || node.domain == "ai.onnx");
    std::set<std::string_view> done;
    for (std::string_view input : node.inputs) {
      if (input.empty() || !done.insert(input).second) continue;
      const auto id = model.value_id(input);
      if (!id || !model.store().weights().contains(*id)) continue;
      if (forwarding && forwarded.contains(*id)) continue;  // folded into its consumer's derived values
      bool covered = false;
      for (const PlannedDerivation& p : mine) {
        if (p.source == *id) {
          if (!covered || mode == DerivedMode::all) BALLAST_RETURN_IF_ERROR(b.add_derived(node.name, p));
          covered = true;
        } else if (p.scales == *id || p.zero_points == *id) {
          covered = true;  // an operand of the node's derivations, read when they are built
        }
      }
      if (!covered) b.add_source_step(node.name, input, *id);
    }
    // Derivations of a weight read through forwarding nodes: this node's
    // inputs do not name it.
    std::set<ValueId> through;
    for (const PlannedDerivation& p : mine) {
      if (done.contains(model.value_name(p.source))) continue;
      if (through.insert(p.source).second || mode == DerivedMode::all)
        BALLAST_RETURN_IF_ERROR(b.add_derived(node.name, p));
    }
  }
  return b.take();
}

std::size_t prefetch_window_end(const Walk& walk, std::size_t next, std::size_t limit, std::uint64_t window_bytes) {
  const std::size_t n = walk.steps.size();
  if (n == 0 || next >= limit) return next;
  const std::uint64_t cap = std::max(walk.steps[next % n].bytes(), window_bytes);
  std::uint64_t sum = 0;
  std::size_t end = next;
  while (end < limit && end - next < n) {
    const std::uint64_t b = walk.steps[end % n].bytes();
    if (sum + b > cap) break;
    sum += b;
    ++end;
  }
  return end;
}

Result<Anchor> measure_anchor(const WeightStore& store, std::span<const ValueId> weights, std::uint64_t bytes) {
  std::vector<const WeightRef*> pieces;
  for (ValueId id : weights) {
    auto it = store.weights().find(id);
    if (it == store.weights().end()) continue;
    auto b = store.bytes(it->second);
    if (b && !b->empty()) pieces.push_back(&it->second);
  }
  if (pieces.empty() || bytes == 0) return make_error(ErrorCode::invalid_argument, "the anchor has no bytes to copy");
  const auto start = std::chrono::steady_clock::now();
  void* fresh = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED)
    return make_error(ErrorCode::out_of_memory, std::string("anchor: mmap of ") + std::to_string(bytes) +
                                                    " bytes failed: " + std::strerror(errno));
  auto* dst = static_cast<std::byte*>(fresh);
  std::uint64_t at = 0;
  // Each piece is copied inside WeightStore::transfer, as a page-in would
  // be: a file truncated meanwhile is an io error, never SIGBUS (and the
  // transfer's one stat per weight is part of what a page-in costs too).
  for (std::size_t i = 0; at < bytes; i = (i + 1) % pieces.size()) {
    const std::uint64_t n = std::min<std::uint64_t>(pieces[i]->byte_length(), bytes - at);
    Status s = store.transfer(*pieces[i], 0, n, [&](Bytes from) -> Status {
      std::memcpy(dst + at, from.data(), from.size());
      return Status();
    });
    if (!s.ok()) {
      ::munmap(fresh, bytes);
      return std::move(s.error()).with_context("anchor: copying the paged bytes");
    }
    at += n;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The copy is used (one byte read) so it cannot be optimised away.
  volatile std::byte sink = dst[bytes - 1];
  static_cast<void>(sink);
  ::munmap(fresh, bytes);
  return Anchor{bytes, seconds};
}

}  // namespace ballast::cli
