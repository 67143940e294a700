// Derivation test cases (shape plus host inputs) and the runner that pushes
// one through the backend and compares it with the scalar reference.
#pragma once

#include <ballast/derivation.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace conformance {

struct DerivationCase {
  std::string label;
  ballast::DerivationLaunch shape;  // pointer fields are filled in by the runner
  std::vector<std::byte> src, scales, zero_points;
  // 0: compare every output row with the reference. Otherwise compare
  // three bands of this many rows (first, middle, last): the scalar
  // reference is too slow for every row of a 4096 x 4096 case under the
  // sanitizers, and every derivation but transpose computes each row from
  // its own source row alone, so a band is checked exactly.
  std::uint64_t verify_row_bands = 0;
};

// Inputs drawn from a seed; `special` mixes in NaN, +-inf, +-0, subnormals
// and values that overflow f16, at known positions.
DerivationCase transpose_case(ballast::DataType element, std::uint64_t rows, std::uint64_t cols, std::uint64_t seed);
DerivationCase to_f16_case(ballast::DataType source, std::uint64_t rows, std::uint64_t cols, bool special,
                           std::uint64_t seed);
DerivationCase int4_case(ballast::Derivation kind, ballast::DataType scale_type, ballast::ZeroPoints zero_points,
                         std::uint64_t n, std::uint64_t k, std::uint32_t block_size, bool special, std::uint64_t seed);
DerivationCase quant_int8_case(ballast::DataType source, std::uint64_t rows, std::uint64_t cols, bool special,
                               std::uint64_t seed);

// Runs `c` on the backend under test: uploads its inputs, launches,
// synchronizes, downloads and compares with the reference under the
// documented tolerances. Empty on success, else what went wrong. Frees
// everything it allocated on every path; uses no test-framework macros, so
// it may run on any thread.
std::string run_derivation_case(const DerivationCase& c);

}  // namespace conformance
