// Planning from derivation rules (PlanOptions::rules).
#pragma once

#include <ballast/derive.hpp>

#include <span>
#include <vector>

namespace ballast::derive {

// Appends what `rules` plan for `model`'s weights, in weight order, to
// `out`, and what they could not plan to `skipped`. `defaults`: the rules
// are default_derivation_rules(), whose rules may match nothing.
Status plan_rules(const Model& model, std::span<const DerivationRule> rules, bool defaults,
                  std::vector<PlannedDerivation>& out, std::vector<PlanSkip>& skipped);

}  // namespace ballast::derive
