// Questions the plan tests ask of a plan.
#pragma once

#include <ballast/derive.hpp>

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace ballast::testing {

// How many planned derivations of `kind` have `weight` as their source.
inline std::size_t count(const std::vector<PlannedDerivation>& plan, std::string_view weight, Derivation kind) {
  return static_cast<std::size_t>(std::count_if(
      plan.begin(), plan.end(), [&](const PlannedDerivation& p) { return p.weight == weight && p.kind() == kind; }));
}

}  // namespace ballast::testing
