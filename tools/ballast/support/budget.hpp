// Command-line byte counts: `--budget 512M`, `--budget 1.5GiB`, `--budget auto`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ballast::cli {

// A positive byte count, optionally with a binary suffix (K, M, G, T or
// KiB, MiB, GiB, TiB, all powers of 1024; B alone means bytes; the letter
// may be lower case), or `auto`. A fraction is allowed with a suffix
// ("1.5G") and rounded down to whole bytes. Returns the empty string and
// sets `bytes` (nullopt for `auto`) on success; otherwise a one-line reason
// and leaves `bytes` alone. SI suffixes (KB, MB, GB) are refused rather than
// guessed at. `what` opens each reason ("budget '0' is zero: ..."). With
// `allow_auto` false (a count that has no automatic value, as --round-bytes)
// `auto` is refused too, and no reason suggests it.
std::string parse_budget(std::string_view text, std::optional<std::uint64_t>& bytes, std::string_view what = "budget",
                         bool allow_auto = true);

// A CLI11-style check: the empty string when `text` parses, else the reason.
inline std::string check_budget(const std::string& text) {
  std::optional<std::uint64_t> ignored;
  return parse_budget(text, ignored);
}

}  // namespace ballast::cli
