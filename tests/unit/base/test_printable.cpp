// printable(): what a terminal is shown of a name (include/ballast/printable.hpp),
// and the default log sink, which writes through it.
#include <ballast/log.hpp>
#include <ballast/printable.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

using ballast::PrintableMode;
using ballast::append_printable;
using ballast::printable;
using ballast::printable_complete_prefix;

TEST_CASE("printable keeps printable ASCII and valid UTF-8 as they are") {
  CHECK(printable("weight.0/attn_q:bias [x] ~") == "weight.0/attn_q:bias [x] ~");
  CHECK(printable("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82") == "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x99\x82");
  CHECK(printable("") == "");
}

TEST_CASE("printable escapes control bytes, one \\xNN each") {
  CHECK(printable("\r\x1b[2Kok\x1b[8m") == "\\x0d\\x1b[2Kok\\x1b[8m");
  CHECK(printable("a\x08\x08" "b\x7f") == "a\\x08\\x08b\\x7f");
  CHECK(printable(std::string("nul\0end", 7)) == "nul\\x00end");
  CHECK(printable("two\nlines\tand tab") == "two\\x0alines\\x09and tab");
  CHECK(printable("a\\x1b") == "a\\\\x1b");  // a name spelling an escape is not one
}

TEST_CASE("printable escapes C1 controls and bidi overrides even though they are valid UTF-8") {
  CHECK(printable("\xc2\x9b" "31m") == "\\xc2\\x9b31m");  // U+009B, CSI
  CHECK(printable("\xc2\x85") == "\\xc2\\x85");           // U+0085, NEL
  CHECK(printable("\xc2\xa0") == "\xc2\xa0");             // U+00A0 is printable
  CHECK(printable("a\xe2\x80\xae" "b") == "a\\u{202e}b");
  CHECK(printable("\xe2\x81\xa6\xd8\x9c") == "\\u{2066}\\u{061c}");
}

TEST_CASE("printable escapes every byte of invalid UTF-8 and resumes at the next good character") {
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");               // overlong '/'
  CHECK(printable("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");      // overlong, three bytes
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");      // a surrogate
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(printable("\xe4\xb8" "x") == "\\xe4\\xb8x");          // truncated
  CHECK(printable("\x80\xc3\xa9") == "\\x80\xc3\xa9");        // stray continuation, then a good one
}

TEST_CASE("stream mode keeps line breaks and backslashes, and escapes the rest alike") {
  std::string out;
  append_printable(out, "line one\nline\\two\r\x1b[A\n", PrintableMode::stream);
  CHECK(out == "line one\nline\\two\\x0d\\x1b[A\n");
}

TEST_CASE("printable_complete_prefix holds back only an unfinished UTF-8 character") {
  CHECK(printable_complete_prefix("abc") == 3);
  CHECK(printable_complete_prefix("ab\xe4\xb8") == 2);
  CHECK(printable_complete_prefix("ab\xe4\xb8\xad") == 5);
  CHECK(printable_complete_prefix("ab\xf0\x9f\x99") == 2);
  CHECK(printable_complete_prefix("ab\xff") == 3);  // never a character: nothing to wait for
  CHECK(printable_complete_prefix("\x80\x80\x80") == 3);
}

TEST_CASE("the default log sink writes one escaped line") {
  char path[] = "/tmp/ballast-log-sink-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  REQUIRE(::dup2(fd, STDERR_FILENO) >= 0);
  ballast::log_message(ballast::LogLevel::warning, "device\x1b[8m", "weight \r\x1b[2Kok\nnext");
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  CHECK(text.str() == "ballast device\\x1b[8m: warning: weight \\x0d\\x1b[2Kok\\x0anext\n");
}

// Every code point, encoded independently here, against printable's rules:
// C0 controls, DEL, C1 controls and the bidi controls are escaped, every
// other scalar value is kept as it is. Each range edge the decoder checks
// (a lead byte's class, overlong forms, surrogates, U+10FFFF, the bidi
// ranges) is met on both sides.
namespace {

std::string utf8(char32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

bool escaped_control(char32_t cp) {
  const bool bidi =
      cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || bidi;
}

}  // namespace

TEST_CASE("printable keeps every scalar value but the controls, and escapes every surrogate") {
  std::size_t kept = 0;
  std::size_t escaped = 0;
  for (char32_t cp = 0; cp <= 0x10ffff; ++cp) {
    const std::string text = utf8(cp);
    const std::string shown = printable(text);
    if (cp >= 0xd800 && cp <= 0xdfff) {
      // Not a scalar value: each of its three bytes escaped.
      INFO("surrogate U+" << std::hex << static_cast<unsigned>(cp));
      REQUIRE(shown.size() == 12);
      REQUIRE(shown.find("\\x") == 0);
      ++escaped;
    } else if (escaped_control(cp)) {
      INFO("control U+" << std::hex << static_cast<unsigned>(cp));
      REQUIRE(shown != text);
      REQUIRE(shown.find('\\') == 0);
      ++escaped;
    } else if (cp != '\\') {
      INFO("U+" << std::hex << static_cast<unsigned>(cp));
      REQUIRE(shown == text);
      ++kept;
    }
  }
  CHECK(escaped == 2048 + 32 + 1 + 32 + 1 + 2 + 5 + 4);
  CHECK(kept == 0x110000 - escaped - 1);
}

TEST_CASE("printable escapes each byte of a form one step past a range edge") {
  CHECK(printable("\xc1\xbf") == "\\xc1\\xbf");                    // overlong U+007F, the last two-byte lead refused
  CHECK(printable("\xe0\x9f\xbf") == "\\xe0\\x9f\\xbf");           // overlong U+07FF
  CHECK(printable("\xf0\x8f\xbf\xbf") == "\\xf0\\x8f\\xbf\\xbf");  // overlong U+FFFF
  CHECK(printable("\xf5\x80\x80\x80") == "\\xf5\\x80\\x80\\x80");  // a lead past f4
  CHECK(printable("\xf8\x88\x80\x80\x80") == "\\xf8\\x88\\x80\\x80\\x80");
}

TEST_CASE("printable_complete_prefix knows every lead byte's length") {
  for (unsigned lead = 0x80; lead <= 0xff; ++lead) {
    std::size_t want = 0;
    if (lead >= 0xc2 && lead <= 0xdf)
      want = 2;
    else if (lead >= 0xe0 && lead <= 0xef)
      want = 3;
    else if (lead >= 0xf0 && lead <= 0xf4)
      want = 4;
    for (std::size_t have = 1; have <= 3; ++have) {
      std::string text = "ab";
      text += static_cast<char>(lead);
      text.append(have - 1, '\x80');
      INFO("lead " << std::hex << lead << std::dec << " with " << have << " of its bytes");
      const bool unfinished = (lead & 0xc0) != 0x80 && want > have;
      // A continuation byte alone is looked through to the lead before it
      // ('b', complete); three continuations are never held back.
      CHECK(printable_complete_prefix(text) == (unfinished ? 2 : text.size()));
    }
  }
}
