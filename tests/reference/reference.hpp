// Scalar references of the derivation kinds, written from the format
// description (docs/derivations.md) and deliberately independent of
// backends/common/kernel_math.hpp: floating-point rounding is done by exact
// comparison against a table of every f16 value (in double), not by bit
// manipulation; rounding to integers uses std::nearbyint; nibbles are found
// with / and %. Slow on purpose: they are the yardstick every backend is
// measured against (tests/conformance, tests/unit).
#pragma once

#include <ballast/derivation.hpp>
#include <ballast/derivation_kinds.hpp>
#include <ballast/status.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ballast::reference {

// ------------------------------------------------------- scalar conversions
// Value of an f16 bit pattern (NaN for NaN patterns, +-inf for infinities).
double f16_value(std::uint16_t bits);
// Value of a bf16 bit pattern.
double bf16_value(std::uint16_t bits);
// Nearest f16 to `value`, ties to the even bit pattern, |value| >= 65520 to
// +-inf; NaN gives the canonical quiet NaN 0x7e00 with value's sign.
std::uint16_t f16_from_double(double value);
inline std::uint16_t f16_from_f32(float value) { return f16_from_double(static_cast<double>(value)); }
// Nearest integer, ties to even (std::nearbyint in the default rounding mode).
double round_half_even(double value);

bool f16_is_nan(std::uint16_t bits);
bool f16_is_subnormal(std::uint16_t bits);

// -------------------------------------------------------------- derivations
// Host bytes of the operands; which are needed follows derivation_sizes().
struct Inputs {
  std::span<const std::byte> src;
  std::span<const std::byte> scales;       // int4 only
  std::span<const std::byte> zero_points;  // int4 with zero points only
};

struct Outputs {
  std::vector<std::byte> dst;
  std::vector<std::byte> dst2;  // pair derivations only
};

// One function per kind, `derive_<kind>`: the kind's reference, into `out`
// already sized for a launch derivation_sizes() accepted (derive() checks
// that first). Each is defined beside its family's reference
// (derivations_reference.cpp: the float and int4 kinds; gguf_reference.cpp:
// GGUF's), and derive()'s table is built from the same list
// (BALLAST_DERIVATION_KINDS): a new kind's reference is its one function.
#define BALLAST_REFERENCE_DECLARE(name) void derive_##name(const DerivationLaunch& shape, const Inputs& in, Outputs& out);
BALLAST_DERIVATION_KINDS(BALLAST_REFERENCE_DECLARE)
#undef BALLAST_REFERENCE_DECLARE

// Runs the derivation described by `shape` (its pointer fields are ignored)
// on host bytes. Errors: the shape is invalid (derivation_sizes' error), or
// an input span is shorter than the shape needs (size_mismatch naming it).
Result<Outputs> derive(const DerivationLaunch& shape, const Inputs& in);

// ------------------------------------------------------------- comparison
struct Tolerance {
  // The backend's Capabilities::flushes_f16_subnormals: an f16 output whose
  // reference value is subnormal may then be a zero of the same sign.
  bool flushes_f16_subnormals = false;
  // The backend's Capabilities::int8_codes_within_one: quant_int8 codes may
  // then differ from the reference's by one. Otherwise they must be equal.
  bool int8_codes_within_one = false;
};

struct Comparison {
  bool ok = true;
  std::uint64_t mismatches = 0;
  std::string message;  // the first mismatch: operand, index, row/col, expected, got
};

// Compares a backend's outputs with the reference's under the documented
// tolerances: bit-exact, except that any two NaNs are equal (payloads may
// differ), and, where `tol` allows, quant_int8 codes may differ by 1 and
// f16 subnormals may flush to zero.
Comparison compare(const DerivationLaunch& shape, const Outputs& expected, std::span<const std::byte> dst,
                   std::span<const std::byte> dst2, const Tolerance& tol = {});

}  // namespace ballast::reference
