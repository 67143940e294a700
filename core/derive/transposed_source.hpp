// The [N, K] copy a per-output-channel quant_int8 of a [K, N] MatMul weight
// reads: itself a planned transpose (and a memoized or resident value).
// Shared by derive_weight() and paged residency, which must agree on it.
#pragma once

#include <ballast/derive.hpp>

#include <array>
#include <optional>

namespace ballast {

inline PlannedDerivation transposed_source_of(const PlannedDerivation& p) {
  PlannedDerivation t = p;
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

// The source weights a derivation's kernel reads itself: its weight (unless
// it reads the transposed copy, which is device memory), its scales and its
// zero points. What both re-check after the kernel's wait: a zero-copy one
// was read from its file's pages.
inline std::array<std::optional<ValueId>, 3> source_operands(const PlannedDerivation& p) {
  return {p.of_transposed ? std::nullopt : std::optional<ValueId>(p.source), p.scales, p.zero_points};
}

}  // namespace ballast
