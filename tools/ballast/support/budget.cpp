#include "support/budget.hpp"

#include <array>
#include <cctype>
#include <utility>

namespace ballast::cli {
namespace {

// Wide enough for any 64-bit count times 2^40 (GCC and Clang both have it).
__extension__ using Wide = unsigned __int128;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// The multiplier of `suffix`; 0 when it is not one we accept.
std::uint64_t multiplier(std::string_view suffix) {
  if (suffix.empty() || suffix == "B" || suffix == "b") return 1;
  static constexpr std::array<std::pair<char, unsigned>, 4> kUnits{{{'k', 10}, {'m', 20}, {'g', 30}, {'t', 40}}};
  const char letter = static_cast<char>(std::tolower(static_cast<unsigned char>(suffix[0])));
  for (const auto& [c, shift] : kUnits) {
    if (c != letter) continue;
    const std::string_view rest = suffix.substr(1);
    if (rest.empty() || rest == "iB" || rest == "ib" || rest == "IB") return std::uint64_t{1} << shift;
    return 0;
  }
  return 0;
}

}  // namespace

std::string parse_budget(std::string_view text, std::optional<std::uint64_t>& bytes, std::string_view what,
                         bool allow_auto) {
  const std::string quoted = std::string(what) + " '" + std::string(text) + "'";
  // The examples every reason ends with: auto among them only where it is accepted.
  const std::string usage = allow_auto ? " (expected a byte count such as 4194304, 512M, 1.5GiB, or auto)"
                                       : " (expected a byte count such as 4194304, 512M or 1.5GiB)";
  if (iequals(text, "auto")) {
    if (!allow_auto) return quoted + " is not a byte count: it has no automatic value" + usage;
    bytes.reset();
    return {};
  }
  std::size_t at = 0;
  Wide whole = 0;
  while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) {
    whole = whole * 10 + static_cast<unsigned>(text[at] - '0');
    if (whole > ~std::uint64_t{0}) return quoted + " does not fit in 64 bits";
    ++at;
  }
  const bool has_whole = at > 0;
  Wide frac = 0, frac_scale = 1;
  bool has_frac = false;
  if (at < text.size() && text[at] == '.') {
    ++at;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) {
      if (frac_scale < 1000000000000000000ULL) {  // further digits cannot change whole bytes of a 64-bit count
        frac = frac * 10 + static_cast<unsigned>(text[at] - '0');
        frac_scale *= 10;
      }
      has_frac = true;
      ++at;
    }
    if (!has_frac) return quoted + " is not a byte count (a digit must follow the '.')";
  }
  if (!has_whole && !has_frac) return quoted + " is not a byte count" + usage;
  const std::string_view suffix = text.substr(at);
  const std::uint64_t mult = multiplier(suffix);
  if (mult == 0) {
    if (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b'))
      return quoted + ": SI suffix '" + std::string(suffix) + "' is ambiguous; use " +
             std::string(1, static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])))) +
             " or " + std::string(1, static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])))) +
             "iB (powers of 1024)";
    return quoted + " has an unknown suffix '" + std::string(suffix) + "'" + usage;
  }
  if (has_frac && mult == 1) return quoted + " is a fraction of a byte" + usage;
  const Wide total = whole * mult + frac * mult / frac_scale;
  if (total > ~std::uint64_t{0}) return quoted + " does not fit in 64 bits";
  if (total == 0) return quoted + " is zero: at least one byte is needed";
  bytes = static_cast<std::uint64_t>(total);
  return {};
}

}  // namespace ballast::cli
