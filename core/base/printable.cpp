#include <ballast/printable.hpp>

#include <cstdint>

namespace ballast {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_byte_escape(std::string& out, unsigned char byte) {
  out += "\\x";
  out += kHex[byte >> 4];
  out += kHex[byte & 0xf];
}

bool is_continuation(unsigned char byte) { return (byte & 0xc0) == 0x80; }

// Length of the valid UTF-8 sequence at the start of `text` and its code
// point, or 0 when it is not one (RFC 3629: no overlongs, no surrogates,
// nothing past U+10FFFF). Only called for bytes of 0x80 and above.
std::size_t utf8_sequence(std::string_view text, char32_t& code_point) {
  const auto lead = static_cast<unsigned char>(text[0]);
  std::size_t length = 0;
  char32_t cp = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
    cp = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    cp = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    cp = lead & 0x07;
  } else {
    return 0;  // a continuation byte, an overlong lead (c0, c1) or past f4
  }
  if (text.size() < length) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (!is_continuation(byte)) return 0;
    cp = (cp << 6) | (byte & 0x3f);
  }
  if ((length == 3 && cp < 0x800) || (length == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;  // overlong, too big
  if (cp >= 0xd800 && cp <= 0xdfff) return 0;                                                   // a surrogate
  code_point = cp;
  return length;
}

bool is_bidi_control(char32_t cp) {
  return cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

void append_printable(std::string& out, std::string_view text, PrintableMode mode) {
  out.reserve(out.size() + text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      if (byte == '\n' && mode == PrintableMode::stream) {
        out += '\n';
      } else if (byte == '\\' && mode == PrintableMode::value) {
        out += "\\\\";
      } else if (byte < 0x20 || byte == 0x7f) {
        append_byte_escape(out, byte);
      } else {
        out += static_cast<char>(byte);
      }
      ++i;
      continue;
    }
    char32_t cp = 0;
    const std::size_t length = utf8_sequence(text.substr(i), cp);
    if (length == 0) {
      append_byte_escape(out, byte);  // one byte at a time: a later byte may start a good sequence
      ++i;
    } else if (cp <= 0x9f) {
      for (std::size_t k = 0; k < length; ++k) append_byte_escape(out, static_cast<unsigned char>(text[i + k]));
      i += length;
    } else if (is_bidi_control(cp)) {
      out += "\\u{";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(cp >> shift) & 0xf];
      out += '}';
      i += length;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
}

std::string printable(std::string_view text) {
  std::string out;
  append_printable(out, text, PrintableMode::value);
  return out;
}

std::size_t printable_complete_prefix(std::string_view text) noexcept {
  // A UTF-8 sequence is at most 4 bytes: only the last 3 can be an
  // unfinished one. Find the last lead byte among them.
  const std::size_t n = text.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto byte = static_cast<unsigned char>(text[n - back]);
    if (is_continuation(byte)) continue;
    std::size_t want = 0;
    if (byte >= 0xc2 && byte <= 0xdf) want = 2;
    else if (byte >= 0xe0 && byte <= 0xef) want = 3;
    else if (byte >= 0xf0 && byte <= 0xf4) want = 4;
    return want > back ? n - back : n;  // an unfinished lead holds back what follows it
  }
  return n;
}

}  // namespace ballast
