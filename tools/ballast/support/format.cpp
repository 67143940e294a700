#include "support/format.hpp"

#include <ballast/printable.hpp>

#include <algorithm>
#include <array>
#include <clocale>
#include <cstdio>
#include <cwchar>
#include <locale.h>
#include <ostream>

namespace ballast::cli {

std::string human_bytes(std::uint64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", value, kUnits[unit]);
  return buf;
}

std::string shape_string(std::span<const std::int64_t> dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

std::string percent(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return buf;
}

Table::Table(std::vector<std::string> header, std::vector<bool> right_aligned)
    : header_(std::move(header)), right_(std::move(right_aligned)) {
  right_.resize(header_.size(), false);
}

void Table::add(std::vector<std::string> row) {
  row.resize(header_.size());
  // Cells are often names from the model: escaped here, so that widths are
  // those of what is shown and no cell can break or overwrite a line.
  for (auto& cell : row) cell = printable(cell);
  rows_.push_back(std::move(row));
}

namespace {

// The C library's Unicode tables, whatever locale the process runs in
// (the CLI never calls setlocale): glibc has C.UTF-8 built in. Null where
// the library lacks it; widths are then one column per code point.
locale_t utf8_locale() {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t{});
  return locale;
}

// Columns a cell takes on a terminal: per code point, wcwidth()'s answer
// under C.UTF-8 (2 for East Asian wide and fullwidth characters such as
// CJK, 0 for combining marks and joiners, 1 for the rest). Cells are
// printable() and so valid UTF-8, and wchar_t holds a code point (glibc).
std::size_t columns(const std::string& cell) {
  const locale_t utf8 = utf8_locale();
  const locale_t previous = utf8 != locale_t{} ? uselocale(utf8) : locale_t{};
  std::size_t total = 0;
  for (std::size_t i = 0; i < cell.size();) {
    const auto lead = static_cast<unsigned char>(cell[i]);
    const std::size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    char32_t cp = length == 1 ? lead : length == 2 ? lead & 0x1Fu : length == 3 ? lead & 0x0Fu : lead & 0x07u;
    for (std::size_t k = 1; k < length && i + k < cell.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(cell[i + k]) & 0x3Fu);
    const int width = utf8 != locale_t{} ? ::wcwidth(static_cast<wchar_t>(cp)) : 1;
    total += width < 0 ? 1 : static_cast<std::size_t>(width);  // -1 (not printable) cannot follow printable()
    i += length;
  }
  if (utf8 != locale_t{}) uselocale(previous);
  return total;
}

}  // namespace

void Table::print(std::ostream& out, const std::string& indent) const {
  std::vector<std::size_t> width(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) width[c] = columns(header_[c]);
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], columns(row[c]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text = indent;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - columns(cells[c]), ' ');
      const bool last = c + 1 == cells.size();
      text += right_[c] ? pad + cells[c] : cells[c] + (last ? "" : pad);
      if (!last) text += "  ";
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << text << '\n';
  };
  line(header_);
  for (const auto& row : rows_) line(row);
}

}  // namespace ballast::cli
