// Bounded work (docs/security.md): what a model makes ballast derive or hold
// against the bytes its files really hold for it. One check and one wording
// for plan_derivations() and auto_budget(), which apply the same cap.
#pragma once

#include <ballast/status.hpp>

#include <algorithm>
#include <cstdio>
#include <string>

namespace ballast::amplification {

// ok unless `produced` exceeds `cap` (> 0) times `referenced` (at least 1);
// otherwise unsupported: "<what> from <referenced> referenced source bytes
// (<ratio>x, above the cap of <cap>x; ...)". `what` says what was counted.
inline Status check(const std::string& what, long double produced, long double referenced, double cap) {
  const long double base = std::max<long double>(referenced, 1);
  if (cap <= 0 || produced <= cap * base) return Status();
  char ratio[64];
  std::snprintf(ratio, sizeof ratio, "%.0Lfx", produced / base);
  char limit[32];
  std::snprintf(limit, sizeof limit, "%gx", cap);
  return make_error(ErrorCode::unsupported,
                    what + " from " + std::to_string(static_cast<unsigned long long>(referenced)) +
                        " referenced source bytes (" + ratio + ", above the cap of " + limit +
                        "; a model that really needs more raises max_amplification (PlanOptions, "
                        "ResidencyOptions, auto_budget's argument), or --max-amplification on the command line)");
}

}  // namespace ballast::amplification
