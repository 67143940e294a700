// Derivation test cases: a shape plus deterministic host inputs, for every
// derivation, source type and zero-point form, with odd sizes, K not a
// multiple of the block size and special float values. One library
// (ballast_test_cases) shared by the conformance suite and the backends'
// own tests (tests/backends/*), so that a case, a special value or a
// generator written for one reaches all of them. Each test keeps its own
// oracle: the scalar reference (tests/reference), kernel_math, or both.
//
// Every generator is a pure function of its seed or of the generator state
// passed in: the same call yields the same bytes on every run and machine.
#pragma once

#include <reference/reference.hpp>

#include <ballast/derivation.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace ballast::test_cases {

struct DerivationCase {
  std::string label;
  DerivationLaunch shape;  // pointer fields unset: the runner fills them in
  std::vector<std::byte> src, scales, zero_points;
  // 0: compare every output row with the reference. Otherwise compare
  // three bands of this many rows (first, middle, last): the scalar
  // reference is too slow for every row of a 4096 x 4096 case under the
  // sanitizers, and every derivation but transpose computes each row from
  // its own source row alone, so a band is checked exactly.
  std::uint64_t verify_row_bands = 0;

  // The three operands as the scalar reference takes them.
  reference::Inputs inputs() const { return {src, scales, zero_points}; }
};

// ------------------------------------------------------------------ values

// n bytes from a 64-bit generator seeded with `seed` (eight bytes a draw).
std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed);
// n bytes, one draw of `rng` each.
std::vector<std::byte> random_bytes(std::mt19937& rng, std::uint64_t n);

// `count` f32 (as bytes): uniform in [lo, hi), and with `specials` about
// one in 13 replaced by a zero, subnormal, f16-overflowing, inf or NaN.
std::vector<std::byte> random_f32(std::mt19937& rng, std::uint64_t count, float lo, float hi, bool specials);
// `count` f16 bit patterns, random sign and mantissa, exponent field at
// most max_exponent (finite values for max_exponent < 31).
std::vector<std::byte> random_f16(std::mt19937& rng, std::uint64_t count, unsigned max_exponent);

// One f32 over every exponent: 1 in 8 a special value (zeros, infinities,
// NaNs, f16 overflow and rounding boundaries, f32 subnormals), 3 in 8 within
// f16's range including its subnormals, the rest any bit pattern.
float awkward_f32(std::mt19937& rng);
// `count` f32 covering every path of the conversion to f16: the special
// values first (ties, overflow, subnormal results, NaN payloads), then
// random bit patterns and normally distributed values.
std::vector<float> awkward_floats(std::size_t count, std::uint32_t seed);

// f32 values that stress conversion to f16: exact ties, both overflow
// sides of 65520, every flavour of NaN, subnormal results and their ties.
const std::vector<float>& f32_specials();
// f16 or bf16 bit patterns of the same kinds.
const std::vector<std::uint16_t>& half_specials();

// quant_int8 rows whose codes are decided by rounding and clamping. In a
// row of ties_row_value(col), max |w| = 127 is held by a negative value
// (col 0), the scale is 1 and w / scale runs through x.5 ties with x even
// and odd on both sides of zero (-9.5 .. 9.5). In a row of
// clamp_row_value(col), the largest magnitude is a negative f32 subnormal
// (190 units of 2^-149; zero in f16), the scale rounds down to one unit and
// w / scale passes -127.5 and +127.5: only the clamp to [-127, 127] keeps
// the codes in range, from both sides.
float quant_int8_ties_row_value(std::uint64_t col);
float quant_int8_clamp_row_value(std::uint64_t col);
// An 8 x k quant_int8 weight of awkward rows: all zero, f32 subnormals
// only, a NaN, an infinity, a maximum so small the scale underflows,
// negative steps, then the ties row and the clamp row above.
std::vector<float> quant_int8_awkward_rows(std::uint64_t k);

// ---------------------------------------------------------- case builders
// Seeded; `special` mixes in NaN, +-inf, +-0, subnormals and values that
// overflow f16 at known positions.
DerivationCase transpose_case(DataType element, std::uint64_t rows, std::uint64_t cols, std::uint64_t seed);
// Columns [col_offset, col_offset + cols) of a random [rows, src_cols] source.
DerivationCase slice_case(DataType element, std::uint64_t rows, std::uint64_t src_cols, std::uint64_t col_offset,
                          std::uint64_t cols, std::uint64_t seed);
DerivationCase to_f16_case(DataType source, std::uint64_t rows, std::uint64_t cols, bool special, std::uint64_t seed);
DerivationCase int4_case(Derivation kind, DataType scale_type, ZeroPoints zero_points, std::uint64_t n, std::uint64_t k,
                         std::uint32_t block_size, bool special, std::uint64_t seed);
DerivationCase quant_int8_case(DataType source, std::uint64_t rows, std::uint64_t cols, bool special,
                               std::uint64_t seed);
// quant_int8_given_max: quant_int8_case's source, and each row's given
// maximum (f32 [rows] in `scales`) drawn around the row's own: equal to it
// (the sharded derive's case), above it, below it (codes clamp), and, with
// `special`, negative, NaN, zero, infinite and subnormal ones.
DerivationCase quant_int8_given_max_case(DataType source, std::uint64_t rows, std::uint64_t cols, bool special,
                                         std::uint64_t seed);
// dequant_gguf or dequant_gguf_f32 of `rows` x `blocks` blocks of a GGUF
// type (kinds::kGgufBlocks): random bytes, so every code, sign and 6-bit
// scale/min packing appears. Without `special` each block's f16/f32 scales
// are rewritten to finite values of moderate size (so values are neither
// mostly inf nor mostly subnormal); with it they stay any bit pattern (NaN,
// inf, subnormal scales, results that overflow f16).
DerivationCase gguf_case(Derivation kind, DataType type, std::uint64_t rows, std::uint64_t blocks, bool special,
                         std::uint64_t seed);

// int4 operands for `shape` (kind, scale type, N x K, block size and
// zero-point form set) drawn from `rng`: random codes; scales over a wide
// range with a few NaN, inf, tiny (subnormal results) and huge
// (overflowing) ones; unpacked zero points mostly integers but some
// halves, a -1 and a NaN.
DerivationCase int4_wide_range_case(std::mt19937& rng, const DerivationLaunch& shape);
// int4 operands with normally distributed scales (sigma 0.05, exact in the
// scale type) and unpacked zero points in [-1, 16.5], every fifth an
// integer and some 7.5: values for bit-exact comparisons.
DerivationCase int4_normal_case(std::mt19937& rng, const DerivationLaunch& shape);

// ------------------------------------------------------------- case lists
// Small odd shapes (edge paths) and shapes with full 16-byte-aligned
// tiles, slabs and chunks for the kernels' fast paths, every derivation,
// source type and zero-point form; quant_int8 rows of half-integer
// quotients (the kernels' reciprocal path must fall back to exact
// division there). About 400 cases, each small.
std::vector<DerivationCase> kernel_cases();

}  // namespace ballast::test_cases
