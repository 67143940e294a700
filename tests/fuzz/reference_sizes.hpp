// Operand sizes of a launch recomputed independently of
// ballast::derivation_sizes(), for fuzz_launch_validation to compare with.
#pragma once

#include "fuzz/launch_input.hpp"

#include <ballast/derivation.hpp>

#include <optional>

namespace fuzz {

// derivation.hpp and docs/derivations.md, in 128 bits: nullopt when the
// launch must be refused (bad kind, type, block size or zero-point form,
// N or K zero for int4, or a size beyond 64 bits).
struct Sizes {
  u128 src = 0, scales = 0, zero_point = 0, dst = 0, dst2 = 0;
};

std::optional<Sizes> reference_sizes(const ballast::DerivationLaunch& l);

}  // namespace fuzz
