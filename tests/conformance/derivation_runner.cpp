#include "conformance/derivation_runner.hpp"

#include "conformance/conformance.hpp"

#include <reference/reference.hpp>
#include <support/output_guard.hpp>

#include <ballast/dtype.hpp>

#include <span>
#include <vector>

namespace conformance {
namespace {

using test_support::check_guard;
using test_support::kGuardBytes;

std::span<const std::byte> rows_of(const std::vector<std::byte>& bytes, std::uint64_t total_bytes,
                                   std::uint64_t total_rows, std::uint64_t first, std::uint64_t count) {
  if (total_bytes == 0) return {};
  const std::uint64_t per_row = total_bytes / total_rows;
  return std::span<const std::byte>(bytes).subspan(first * per_row, count * per_row);
}

// Compares output rows [first, first + count) with the reference run on the
// matching source rows; every operand's size is linear in the row count.
std::string compare_rows(const DerivationCase& c, const ballast::DerivationLaunch& shape, std::uint64_t first,
                         std::uint64_t count, const ballast::DerivationSizes& sizes, const std::vector<std::byte>& dst,
                         const std::vector<std::byte>& dst2, const ballast::reference::Tolerance& tol) {
  ballast::DerivationLaunch part = shape;
  part.rows = count;
  const std::uint64_t rows = shape.rows;
  const ballast::reference::Inputs in{rows_of(c.src, sizes.src_bytes, rows, first, count),
                                      rows_of(c.scales, sizes.scales_bytes, rows, first, count),
                                      rows_of(c.zero_points, sizes.zero_point_bytes, rows, first, count)};
  auto expected = ballast::reference::derive(part, in);
  if (!expected.ok()) return "reference: " + expected.error().to_string();
  const auto cmp = ballast::reference::compare(part, *expected, rows_of(dst, sizes.dst_bytes, rows, first, count),
                                               rows_of(dst2, sizes.dst2_bytes, rows, first, count), tol);
  if (cmp.ok) return {};
  const std::string where = count == rows ? "" : " (in the band of rows from " + std::to_string(first) + ")";
  return std::to_string(cmp.mismatches) + " mismatches" + where + "; first: " + cmp.message;
}

}  // namespace

std::string run_derivation_case(const DerivationCase& c) {
  auto& g = gpu();
  auto sizes = ballast::derivation_sizes(c.shape);
  if (!sizes.ok()) return "shape: " + sizes.error().to_string();

  // Owns what this run allocated; frees it whatever happens.
  struct Owned {
    std::vector<DevicePtr> ptrs;
    std::string error;
    ~Owned() {
      for (auto p : ptrs) static_cast<void>(gpu().free(p));
    }
    DevicePtr take(std::uint64_t bytes) {
      auto p = gpu().allocate(bytes, 256);
      if (!p.ok()) {
        error = "allocate " + std::to_string(bytes) + ": " + p.error().to_string();
        return 0;
      }
      ptrs.push_back(*p);
      return *p;
    }
  } owned;

  ballast::DerivationLaunch l = c.shape;
  auto place = [&](const std::vector<std::byte>& host, std::uint64_t needed) -> DevicePtr {
    if (needed == 0) return 0;
    const DevicePtr p = owned.take(needed);
    if (p == 0) return 0;
    auto s = g.copy_to_device(p, 0, std::span<const std::byte>(host.data(), needed));
    if (!s.ok()) owned.error = "upload: " + s.to_string();
    return p;
  };
  l.src = place(c.src, sizes->src_bytes);
  l.scales = place(c.scales, sizes->scales_bytes);
  l.zero_point = place(c.zero_points, sizes->zero_point_bytes);
  auto output = [&](std::uint64_t bytes) -> DevicePtr {
    const DevicePtr p = owned.take(bytes + kGuardBytes);
    if (p == 0) return 0;
    const std::vector<std::byte> fill(kGuardBytes, test_support::kGuardFill);
    if (auto s = g.copy_to_device(p, bytes, fill); !s.ok()) owned.error = "fill the guard: " + s.to_string();
    return p;
  };
  l.dst = output(sizes->dst_bytes);
  if (sizes->dst2_bytes > 0) l.dst2 = output(sizes->dst2_bytes);
  if (!owned.error.empty()) return owned.error;

  if (auto s = g.launch(l); !s.ok()) return "launch: " + s.to_string();
  if (auto s = g.synchronize(); !s.ok()) return "synchronize: " + s.to_string();
  if (auto e = check_guard(g, "dst", l.dst, sizes->dst_bytes); !e.empty()) return e;
  if (l.dst2 != 0)
    if (auto e = check_guard(g, "dst2", l.dst2, sizes->dst2_bytes); !e.empty()) return e;

  std::vector<std::byte> dst(sizes->dst_bytes), dst2(sizes->dst2_bytes);
  if (auto s = g.copy_to_host(dst, l.dst, 0); !s.ok()) return "download dst: " + s.to_string();
  if (!dst2.empty()) {
    if (auto s = g.copy_to_host(dst2, l.dst2, 0); !s.ok()) return "download dst2: " + s.to_string();
  }

  ballast::reference::Tolerance tol;
  tol.flushes_f16_subnormals = g.capabilities().flushes_f16_subnormals;
  tol.int8_codes_within_one = g.capabilities().int8_codes_within_one;
  const bool banded =
      c.verify_row_bands > 0 && c.shape.kind != ballast::Derivation::transpose && 3 * c.verify_row_bands < c.shape.rows;
  if (!banded) return compare_rows(c, c.shape, 0, c.shape.rows, *sizes, dst, dst2, tol);
  const std::uint64_t band = c.verify_row_bands;
  for (std::uint64_t first : {std::uint64_t{0}, c.shape.rows / 2 - band / 2, c.shape.rows - band}) {
    std::string failure = compare_rows(c, c.shape, first, band, *sizes, dst, dst2, tol);
    if (!failure.empty()) return failure;
  }
  return {};
}

}  // namespace conformance
