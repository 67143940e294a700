// Text formatting shared by the CLI commands: human sizes, shapes, aligned tables.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

namespace ballast::cli {

// 1536 -> "1.50 KiB"; below 1 KiB the exact count: "512 B".
std::string human_bytes(std::uint64_t bytes);

// "[256, 512]"; "[]" for a scalar.
std::string shape_string(std::span<const std::int64_t> dims);

// "50.00%" of part in whole; "-" when whole is zero.
std::string percent(std::uint64_t part, std::uint64_t whole);

// Columns padded to their widest cell; right-aligned columns for numbers.
// Every cell is escaped for the terminal (ballast/printable.hpp) as it is
// added, which leaves valid UTF-8. Widths are a terminal's columns, as the
// C library's Unicode tables give them: a name in Cyrillic, CJK (two
// columns a character) or with combining accents (none) lines up.
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> right_aligned = {});
  void add(std::vector<std::string> row);
  void print(std::ostream& out, const std::string& indent = "") const;
  bool empty() const noexcept { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace ballast::cli
