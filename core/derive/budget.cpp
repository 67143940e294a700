// auto_budget(): referenced source bytes plus the planned derivations'
// output bytes, from the store's accounting (docs/residency.md).
#include <ballast/residency.hpp>

#include "derive/identity.hpp"

#include <set>

namespace ballast {
namespace {

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

  std::set<identity::Entry> seen;
  for (const PlannedDerivation& p : plan) {
    DerivationLaunch l = p.launch;
    l.kind = p.kind;
    if (!seen.insert(identity::of_derivation(store, p)).second)
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
