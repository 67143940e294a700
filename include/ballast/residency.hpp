// Residency: how much device memory a model's weights need, from the
// accounting of what its graph references (never from file lengths).
//
//   auto budget = ballast::auto_budget(model);   // Result<AutoBudget>
//   budget->total   // referenced source bytes + the planned derivations' outputs
//
// A data file carrying an orphaned prefix (a re-export appended to the old
// blob) costs nothing here: only the bytes some weight points at count.
// The residency strategies (upload, zero_copy, paged) and what exists of
// them today: docs/residency.md.
#pragma once

#include <ballast/export.hpp>
#include <ballast/derive.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <span>

BALLAST_API_BEGIN

namespace ballast {

struct AutoBudget {
  std::uint64_t external_bytes = 0;  // union of the referenced ranges of every data file (dead bytes excluded)
  std::uint64_t inline_bytes = 0;    // weights stored inside the .onnx
  std::uint64_t source_bytes = 0;    // external_bytes + inline_bytes
  std::uint64_t derived_bytes = 0;   // every output of the planned derivations (derivation_sizes)
  std::uint64_t derivations = 0;     // planned derivations counted (the same bytes with the same
                                     // parameters count once, as the memo shares them)
  std::uint64_t total = 0;           // source_bytes + derived_bytes
};

// The budget of `store` with `plan` (plan_derivations() of its model).
// overflow when a sum exceeds 64 bits; a planned launch derivation_sizes()
// refuses is that error, naming the weight.
Result<AutoBudget> auto_budget(const WeightStore& store, std::span<const PlannedDerivation> plan);
// plan_derivations(model), then the above.
Result<AutoBudget> auto_budget(const Model& model);

}  // namespace ballast

BALLAST_API_END
