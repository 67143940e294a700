#include <ballast/model_resource.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace ballast {

bool TeardownReport::ok() const noexcept { return failed_resources() == 0; }

std::uint64_t TeardownReport::bytes_freed() const noexcept {
  std::uint64_t total = 0;
  for (const TeardownEntry& e : entries) total += e.bytes_freed;
  return total;
}

std::uint64_t TeardownReport::allocations_freed() const noexcept {
  std::uint64_t total = 0;
  for (const TeardownEntry& e : entries) total += e.allocations_freed;
  return total;
}

std::size_t TeardownReport::failed_resources() const noexcept {
  return static_cast<std::size_t>(
      std::count_if(entries.begin(), entries.end(), [](const TeardownEntry& e) { return !e.status.ok(); }));
}

Status TeardownReport::status() const {
  for (const TeardownEntry& e : entries)
    if (!e.status.ok()) return Status(e.status).with_context("tearing down " + e.label);
  return {};
}

namespace {

// 1234567 -> "1,234,567": byte counts stay exact but readable.
std::string grouped(std::uint64_t v) {
  std::string digits = std::to_string(v);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string human(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[unit]);
  return buf;
}

enum class Align { left, right };

std::string pad(const std::string& s, std::size_t width, Align align) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return align == Align::left ? s + fill : fill + s;
}

}  // namespace

std::string TeardownReport::to_string() const {
  struct Row {
    std::string order, label, status, allocations, bytes, detail;
  };
  std::vector<Row> rows;
  rows.push_back({"#", "resource", "status", "allocations", "bytes freed", ""});
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const TeardownEntry& e = entries[i];
    rows.push_back({std::to_string(i + 1), e.label, e.status.ok() ? "ok" : "FAILED", grouped(e.allocations_freed),
                    grouped(e.bytes_freed), e.status.ok() ? "" : e.status.to_string()});
  }
  rows.push_back({"", "total", ok() ? "ok" : "FAILED", grouped(allocations_freed()), grouped(bytes_freed()), ""});

  std::size_t w[5] = {0, 0, 0, 0, 0};
  for (const Row& r : rows) {
    w[0] = std::max(w[0], r.order.size());
    w[1] = std::max(w[1], r.label.size());
    w[2] = std::max(w[2], r.status.size());
    w[3] = std::max(w[3], r.allocations.size());
    w[4] = std::max(w[4], r.bytes.size());
  }

  const std::size_t failed = failed_resources();
  std::string out = "teardown: " + std::to_string(entries.size()) + " resource" + (entries.size() == 1 ? "" : "s") +
                    " released last-registered first, " +
                    (failed == 0 ? std::string("all ok") : std::to_string(failed) + " failed") + ", " +
                    human(bytes_freed()) + " freed\n";
  for (const Row& r : rows) {
    std::string line = "  " + pad(r.order, w[0], Align::right) + "  " + pad(r.label, w[1], Align::left) + "  " +
                       pad(r.status, w[2], Align::left) + "  " + pad(r.allocations, w[3], Align::right) + "  " +
                       pad(r.bytes, w[4], Align::right);
    if (!r.detail.empty()) line += "  " + r.detail;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace ballast
