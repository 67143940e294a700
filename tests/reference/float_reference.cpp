// Float conversions for the references, by value rather than by bits: every
// f16 bit pattern is decoded with ldexp, and rounding picks between the two
// neighbouring f16 values by comparing against their midpoint, all in double
// where every f16, bf16 and f32 value and every f16 midpoint is exact.
#include <reference/reference.hpp>

#include <cmath>
#include <limits>

namespace ballast::reference {

namespace {

// Positive f16 patterns are ordered like their values, and the formula for
// normals extended to 0x7c00 gives 65536: the value an f16 with one more
// exponent would have, so rounding up to it means overflowing to inf.
double positive_f16_or_limit(std::uint16_t bits) {
  const int e = (bits >> 10) & 0x1f;
  const int m = bits & 0x3ff;
  if (e == 0) return std::ldexp(static_cast<double>(m), -24);
  return std::ldexp(static_cast<double>(1024 + m), e - 25);
}

}  // namespace

double f16_value(std::uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int e = (bits >> 10) & 0x1f;
  const int m = bits & 0x3ff;
  if (e == 0x1f) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  return sign * positive_f16_or_limit(static_cast<std::uint16_t>(bits & 0x7fff));
}

double bf16_value(std::uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int e = (bits >> 7) & 0xff;
  const int m = bits & 0x7f;
  if (e == 0xff) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), -133);
  return sign * std::ldexp(static_cast<double>(128 + m), e - 134);
}

std::uint16_t f16_from_double(double value) {
  const std::uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return static_cast<std::uint16_t>(sign | 0x7e00);
  const double a = std::fabs(value);
  if (a >= positive_f16_or_limit(0x7c00)) return static_cast<std::uint16_t>(sign | 0x7c00);
  // Largest pattern `lo` whose value is <= a (binary search over 0..0x7bff).
  std::uint32_t lo = 0, hi = 0x7c00;  // invariant: value(lo) <= a < value(hi)
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (positive_f16_or_limit(static_cast<std::uint16_t>(mid)) <= a) lo = mid;
    else hi = mid;
  }
  const double below = positive_f16_or_limit(static_cast<std::uint16_t>(lo));
  const double above = positive_f16_or_limit(static_cast<std::uint16_t>(hi));
  const double midpoint = (below + above) / 2;  // exact: one more bit than an f16
  std::uint32_t pick;
  if (a < midpoint) pick = lo;
  else if (a > midpoint) pick = hi;
  else pick = (lo % 2 == 0) ? lo : hi;
  return static_cast<std::uint16_t>(sign | pick);
}

double round_half_even(double value) { return std::nearbyint(value); }

bool f16_is_nan(std::uint16_t bits) { return (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0; }

bool f16_is_subnormal(std::uint16_t bits) { return (bits & 0x7c00) == 0 && (bits & 0x3ff) != 0; }

}  // namespace ballast::reference
