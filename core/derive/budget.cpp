// auto_budget(): referenced source bytes plus the planned derivations'
// output bytes, from the store's accounting (docs/residency.md).
#include <ballast/residency.hpp>

#include "derive/amplification.hpp"
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

Result<AutoBudget> auto_budget(const WeightStore& store, std::span<const PlannedDerivation> plan,
                               double max_amplification) {
  AutoBudget b;
  b.external_bytes = store.referenced_weight_bytes().total;
  // Sources as paged residency keys them: each distinct byte range once
  // (aliases share one), so two ranges that overlap are two entries and
  // count twice here too; the union alone would under-count them and a
  // budget made of it would evict on every pin.
  std::set<identity::Bytes> ranges;
  std::uint64_t keyed_external = 0;
  for (const auto& [id, w] : store.weights()) {
    if (!w.is_external()) {
      BALLAST_RETURN_IF_ERROR(add(b.inline_bytes, w.byte_length(), "inline bytes"));
    } else if (w.byte_length() != 0 && ranges.insert(identity::of_bytes(store, id)).second) {
      BALLAST_RETURN_IF_ERROR(add(keyed_external, w.byte_length(), "source bytes"));
    }
  }
  b.overlap_bytes = keyed_external > b.external_bytes ? keyed_external - b.external_bytes : 0;

  std::set<identity::Entry> seen;
  for (const PlannedDerivation& p : plan) {
    DerivationLaunch l = p.launch;
    if (!seen.insert(identity::of_derivation(store, p)).second)
      continue;
    auto sizes = derivation_sizes(l);
    if (!sizes.ok()) {
      Error e = std::move(sizes.error());
      e.tensor = p.weight;
      return std::move(e).with_context("auto budget: sizing " + std::string(derivation_name(p.kind())) + " of '" +
                                       p.weight + "'");
    }
    BALLAST_RETURN_IF_ERROR(add(b.derived_bytes, sizes->dst_bytes, "derived bytes"));
    BALLAST_RETURN_IF_ERROR(add(b.derived_bytes, sizes->dst2_bytes, "derived bytes"));
    b.derivations += 1;
  }
  b.source_bytes = b.external_bytes;
  BALLAST_RETURN_IF_ERROR(add(b.source_bytes, b.overlap_bytes, "source bytes"));
  BALLAST_RETURN_IF_ERROR(add(b.source_bytes, b.inline_bytes, "source bytes"));
  b.total = b.source_bytes;
  BALLAST_RETURN_IF_ERROR(add(b.total, b.derived_bytes, "the total"));
  // Bounded work (docs/security.md): device bytes against the bytes the
  // files really hold for the model.
  const std::uint64_t referenced = b.external_bytes + b.inline_bytes;
  if (b.total > referenced)
    BALLAST_RETURN_IF_ERROR(amplification::check(
        "auto budget: the model would hold " + std::to_string(b.total) + " device bytes (" +
            std::to_string(b.source_bytes) + " of sources as residency keys them, of which " +
            std::to_string(b.overlap_bytes) + " in overlapping ranges, and " + std::to_string(b.derived_bytes) +
            " derived)",
        static_cast<long double>(b.total), static_cast<long double>(referenced), max_amplification));
  return b;
}

Result<AutoBudget> auto_budget(const Model& model, double max_amplification) {
  PlanOptions options;
  options.max_amplification = max_amplification;
  // The budget counts what would be derived: a weight the rules skip is not.
  std::vector<PlanSkip> skipped;
  options.skipped = &skipped;
  BALLAST_ASSIGN_OR_RETURN(auto plan, plan_derivations(model, options));
  return auto_budget(model.store(), plan, max_amplification);
}

}  // namespace ballast
