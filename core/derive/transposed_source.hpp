// The [N, K] copy a per-output-channel quant_int8 of a [K, N] MatMul weight
// reads: itself a planned transpose (and a memoized or resident value).
// Shared by derive_weight() and paged residency, which must agree on it.
#pragma once

#include <ballast/derive.hpp>

namespace ballast {

inline PlannedDerivation transposed_source_of(const PlannedDerivation& p) {
  PlannedDerivation t = p;
  t.kind = Derivation::transpose;
  t.of_transposed = false;
  t.launch.kind = Derivation::transpose;
  t.launch.rows = p.launch.cols;
  t.launch.cols = p.launch.rows;
  t.launch.block_size = 0;
  t.launch.zero_points = ZeroPoints::absent;
  t.scales.reset();
  t.zero_points.reset();
  return t;
}

}  // namespace ballast
