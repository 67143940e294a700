// Output comparison under the documented tolerances, reporting the first
// mismatch in terms a person can check by hand.
#include <reference/reference.hpp>
#include "reference/element_bytes.hpp"

#include <ballast/dtype.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace ballast::reference {

namespace {

std::string hex(std::uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Collects mismatches of one operand viewed as a [rows, cols] matrix.
struct Checker {
  Comparison& result;
  const char* operand;
  std::uint64_t cols;

  void mismatch(std::uint64_t index, const std::string& expected, const std::string& got) {
    if (result.mismatches++ == 0) {
      result.ok = false;
      result.message = std::string(operand) + "[" + std::to_string(index) + "] (row " + std::to_string(index / cols) +
                       ", col " + std::to_string(index % cols) + "): expected " + expected + ", got " + got;
    }
  }
};

bool same_length(Comparison& r, const char* operand, std::uint64_t expected, std::uint64_t got) {
  if (expected == got) return true;
  r.ok = false;
  ++r.mismatches;
  if (r.message.empty())
    r.message = std::string(operand) + ": expected " + std::to_string(expected) + " bytes, got " + std::to_string(got);
  return false;
}

bool f16_within(std::uint16_t expected, std::uint16_t got, const Tolerance& tol) {
  if (expected == got) return true;
  if (f16_is_nan(expected) && f16_is_nan(got)) return true;
  return tol.flushes_f16_subnormals && f16_is_subnormal(expected) && got == (expected & 0x8000);
}

void compare_f16(Checker c, std::span<const std::byte> expected, std::span<const std::byte> got, const Tolerance& tol) {
  for (std::uint64_t i = 0; i < expected.size() / 2; ++i) {
    const auto e = load<std::uint16_t>(expected, i), g = load<std::uint16_t>(got, i);
    if (!f16_within(e, g, tol))
      c.mismatch(i, hex(e, 4) + " (" + number(f16_value(e)) + ")", hex(g, 4) + " (" + number(f16_value(g)) + ")");
  }
}

void compare_bytes(Checker c, std::span<const std::byte> expected, std::span<const std::byte> got, std::uint64_t width) {
  for (std::uint64_t i = 0; i < expected.size() / width; ++i) {
    if (std::memcmp(expected.data() + i * width, got.data() + i * width, width) == 0) continue;
    std::uint64_t e = 0, g = 0;
    std::memcpy(&e, expected.data() + i * width, width);
    std::memcpy(&g, got.data() + i * width, width);
    c.mismatch(i, hex(e, static_cast<int>(2 * width)), hex(g, static_cast<int>(2 * width)));
  }
}

void compare_codes(Checker c, std::span<const std::byte> expected, std::span<const std::byte> got, const Tolerance& tol) {
  const int allowed = tol.int8_codes_within_one ? 1 : 0;
  for (std::uint64_t i = 0; i < expected.size(); ++i) {
    const int e = load<std::int8_t>(expected, i), g = load<std::int8_t>(got, i);
    if (e - g > allowed || g - e > allowed) c.mismatch(i, std::to_string(e), std::to_string(g));
  }
}

void compare_f32(Checker c, std::span<const std::byte> expected, std::span<const std::byte> got) {
  for (std::uint64_t i = 0; i < expected.size() / 4; ++i) {
    const auto e = load<float>(expected, i), g = load<float>(got, i);
    std::uint32_t eb, gb;
    std::memcpy(&eb, &e, 4);
    std::memcpy(&gb, &g, 4);
    if (eb == gb || (std::isnan(e) && std::isnan(g))) continue;
    c.mismatch(i, hex(eb, 8) + " (" + number(e) + ")", hex(gb, 8) + " (" + number(g) + ")");
  }
}

bool bf16_is_nan(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

void compare_bf16(Checker c, std::span<const std::byte> expected, std::span<const std::byte> got) {
  for (std::uint64_t i = 0; i < expected.size() / 2; ++i) {
    const auto e = load<std::uint16_t>(expected, i), g = load<std::uint16_t>(got, i);
    if (e == g || (bf16_is_nan(e) && bf16_is_nan(g))) continue;
    c.mismatch(i, hex(e, 4), hex(g, 4));
  }
}

}  // namespace

Comparison compare(const DerivationLaunch& shape, const Outputs& expected, std::span<const std::byte> dst,
                   std::span<const std::byte> dst2, const Tolerance& tol) {
  Comparison r;
  const auto layout = derivation_layout(shape);
  if (!layout) {
    r.ok = false;
    r.mismatches = 1;
    r.message = "shape: " + layout.error().message;
    return r;
  }
  // Each output as the kind table lays it out, compared as its row says.
  const struct {
    kinds::Slot slot;
    const char* name;
    std::span<const std::byte> expected, got;
  } outputs[] = {{kinds::Slot::dst, "dst", expected.dst, dst}, {kinds::Slot::dst2, "dst2", expected.dst2, dst2}};
  for (const auto& out : outputs) {
    const OperandLayout& o = (*layout)[out.slot];
    if (!o.present) continue;
    if (!same_length(r, out.name, out.expected.size(), out.got.size())) continue;
    std::uint64_t row = 1;  // elements of one outermost index, for the (row, col) of a mismatch
    for (int d = 1; d < o.rank; ++d) row *= o.dims[d];
    const Checker c{r, out.name, row == 0 ? 1 : row};
    switch (o.row->rounding) {
      case kinds::Rounding::f16: compare_f16(c, out.expected, out.got, tol); break;
      case kinds::Rounding::int8_code: compare_codes(c, out.expected, out.got, tol); break;
      case kinds::Rounding::exact:
        // A computed float (quant_int8's scales, a dequantized f32 or bf16)
        // may be any NaN where the reference's is; a copy of the source's
        // elements is bit for bit.
        if (o.type == DataType::float32 && !o.row->launch_type) compare_f32(c, out.expected, out.got);
        else if (o.type == DataType::bfloat16 && !o.row->launch_type) compare_bf16(c, out.expected, out.got);
        else compare_bytes(c, out.expected, out.got, dtype_bits(o.type) / 8);
        break;
    }
  }
  return r;
}

}  // namespace ballast::reference
