// Text from a model (tensor and node names, locations, metadata) made safe
// to show on a terminal. A name is attacker-chosen bytes: written raw, a
// carriage return, cursor movement or a conceal sequence (ESC [ 8 m) can
// print a fake "ok" line over a real failure. ballast's human-readable
// output (the CLI's tables, lines and errors, the default log sink) passes
// every such value through here.
//
// Kept: printable ASCII and valid UTF-8 of printable characters.
// Escaped, one escape per byte as \xNN (two lowercase hex digits):
//   control bytes (0x00-0x1f, 0x7f), C1 controls encoded in UTF-8
//   (U+0080-U+009F, which some terminals obey like ESC [), and every byte
//   of invalid UTF-8 (stray continuation bytes, truncated or overlong
//   sequences, surrogates, code points past U+10FFFF).
// Escaped as \u{XXXX}: the bidirectional controls (U+061C, U+200E, U+200F,
//   U+202A-U+202E, U+2066-U+2069), which reorder what is shown.
// In a value (printable()), a backslash is written as \\, so an escape
// can never be confused with a name that spells one; newline and tab are
// escaped too, since a value is never more than one line.
#pragma once

#include <ballast/export.hpp>

#include <string>
#include <string_view>

BALLAST_API_BEGIN

namespace ballast {

enum class PrintableMode {
  value,   // one value on one line: \n, \t and \\ escaped as well
  stream,  // whole output text: line breaks kept, backslashes kept as they are
};

// Appends `text` to `out`, escaped as above.
void append_printable(std::string& out, std::string_view text, PrintableMode mode = PrintableMode::value);

// `text` escaped as above, as one value.
std::string printable(std::string_view text);

// How many leading bytes of `text` end on a character boundary: all of it,
// unless it ends inside what may still become a valid UTF-8 sequence (for a
// stream filter that must not cut a character in two).
std::size_t printable_complete_prefix(std::string_view text) noexcept;

}  // namespace ballast

BALLAST_API_END
