// auto_budget(): referenced source bytes plus the planned derivations'
// output bytes, from the store's accounting (docs/residency.md).
#include <ballast/residency.hpp>

#include <optional>
#include <set>
#include <tuple>

namespace ballast {
namespace {

// Where a weight's bytes are, so that two names for the same bytes are one
// operand (the memo keys on the device pointer, which zero_copy makes the
// same for the same bytes).
using Where = std::tuple<int, std::uint64_t, std::uint64_t, std::uint64_t>;

Where where(const WeightStore& store, std::optional<ValueId> id) {
  if (!id) return {0, 0, 0, 0};
  auto it = store.weights.find(*id);
  if (it != store.weights.end()) {
    const WeightRef& w = it->second;
    if (w.is_external()) {
      if (auto p = store.external_mmap_provenance(w)) return {1, p->mapping, p->offset, p->length};
    } else {
      return {2, reinterpret_cast<std::uintptr_t>(w.inline_bytes.data()), w.inline_bytes.size(), 0};
    }
  }
  return {3, id->index, 0, 0};
}

Status add(std::uint64_t& sum, std::uint64_t n, const char* what) {
  if (__builtin_add_overflow(sum, n, &sum))
    return make_error(ErrorCode::overflow, std::string("auto budget: ") + what + " exceed 64 bits");
  return Status();
}

}  // namespace

Result<AutoBudget> auto_budget(const WeightStore& store, std::span<const PlannedDerivation> plan) {
  AutoBudget b;
  b.external_bytes = store.referenced_weight_bytes().total;
  for (const auto& [id, w] : store.weights)
    if (!w.is_external()) BALLAST_RETURN_IF_ERROR(add(b.inline_bytes, w.byte_length(), "inline bytes"));

  using Key = std::tuple<int, Where, Where, Where, bool, std::uint64_t, std::uint64_t, std::uint32_t, int, int>;
  std::set<Key> seen;
  for (const PlannedDerivation& p : plan) {
    DerivationLaunch l = p.launch;
    l.kind = p.kind;
    if (!seen.emplace(static_cast<int>(p.kind), where(store, p.source), where(store, p.scales),
                      where(store, p.zero_points), p.of_transposed, l.rows, l.cols, l.block_size,
                      static_cast<int>(l.src_type), static_cast<int>(l.zero_points))
             .second)
      continue;
    auto sizes = derivation_sizes(l);
    if (!sizes.ok()) {
      Error e = std::move(sizes.error());
      e.tensor = p.weight;
      return std::move(e).with_context("auto budget: sizing " + std::string(derivation_name(p.kind)) + " of '" +
                                       p.weight + "'");
    }
    BALLAST_RETURN_IF_ERROR(add(b.derived_bytes, sizes->dst_bytes, "derived bytes"));
    BALLAST_RETURN_IF_ERROR(add(b.derived_bytes, sizes->dst2_bytes, "derived bytes"));
    b.derivations += 1;
  }
  b.source_bytes = b.external_bytes;
  BALLAST_RETURN_IF_ERROR(add(b.source_bytes, b.inline_bytes, "source bytes"));
  b.total = b.source_bytes;
  BALLAST_RETURN_IF_ERROR(add(b.total, b.derived_bytes, "the total"));
  return b;
}

Result<AutoBudget> auto_budget(const Model& model) {
  BALLAST_ASSIGN_OR_RETURN(auto plan, plan_derivations(model));
  return auto_budget(model.store(), plan);
}

}  // namespace ballast
