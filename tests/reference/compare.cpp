// Output comparison under the documented tolerances, reporting the first
// mismatch in terms a person can check by hand.
#include <reference/reference.hpp>

#include <ballast/dtype.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace ballast::reference {

namespace {

template <class T>
T load(std::span<const std::byte> bytes, std::uint64_t index) {
  T v;
  std::memcpy(&v, bytes.data() + index * sizeof(T), sizeof(T));
  return v;
}

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

}  // namespace

Comparison compare(const DerivationLaunch& shape, const Outputs& expected, std::span<const std::byte> dst,
                   std::span<const std::byte> dst2, const Tolerance& tol) {
  Comparison r;
  const bool pair = derivation_yields_pair(shape.kind);
  const bool dst_ok = same_length(r, "dst", expected.dst.size(), dst.size());
  const bool dst2_ok = !pair || same_length(r, "dst2", expected.dst2.size(), dst2.size());
  if (!dst_ok || !dst2_ok) return r;
  const std::uint64_t cols = shape.cols == 0 ? 1 : shape.cols;
  switch (shape.kind) {
    case Derivation::transpose:
      compare_bytes({r, "dst", shape.rows == 0 ? 1 : shape.rows}, expected.dst, dst, dtype_bits(shape.src_type) / 8);
      break;
    case Derivation::to_f16:
    case Derivation::dequant_int4: compare_f16({r, "dst", cols}, expected.dst, dst, tol); break;
    case Derivation::repack_int4:
      compare_bytes({r, "dst", (shape.cols + 7) / 8}, expected.dst, dst, 4);
      compare_f16({r, "dst2", 2 * k_blocks(shape.cols, shape.block_size)}, expected.dst2, dst2, tol);
      break;
    case Derivation::quant_int8:
      compare_codes({r, "dst", cols}, expected.dst, dst, tol);
      compare_f32({r, "dst2", 1}, expected.dst2, dst2);
      break;
  }
  return r;
}

}  // namespace ballast::reference
