// The CLI's output boundary: everything written to std::cout and std::cerr
// passes through a filter that escapes what a terminal would act on
// (ballast/printable.hpp, stream mode: line breaks kept), so no command can
// put a model's control bytes on the screen, whichever line it prints them
// in. Single values are escaped where they are printed as well (tables,
// error lines), which also keeps a newline in a name from starting a line.
// JSON is written as ASCII (json_text), which the filter leaves unchanged.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <ostream>
#include <streambuf>
#include <string>

namespace ballast::cli {

// A streambuf that escapes what passes through and writes it to `target`.
class EscapingStreambuf final : public std::streambuf {
 public:
  explicit EscapingStreambuf(std::streambuf* target) : target_(target) {}
  ~EscapingStreambuf() override;

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  // Escapes and forwards what is buffered, up to a character boundary
  // unless `all` (then an unfinished sequence is escaped as it stands).
  void forward(bool all);
  std::streambuf* target_;
  std::string pending_;
};

// Installs the filter on std::cout and std::cerr for its lifetime (main()),
// then puts the streams back as they were.
class TerminalGuard {
 public:
  TerminalGuard();
  ~TerminalGuard();
  TerminalGuard(const TerminalGuard&) = delete;
  TerminalGuard& operator=(const TerminalGuard&) = delete;

 private:
  std::streambuf* cout_ = nullptr;
  std::streambuf* cerr_ = nullptr;
  std::unique_ptr<EscapingStreambuf> cout_filter_;
  std::unique_ptr<EscapingStreambuf> cerr_filter_;
};

// A document as the CLI prints it: indented, every non-ASCII character as
// \uXXXX (so the text is printable ASCII and passes the filter unchanged),
// control characters as JSON escapes, and bytes that are not valid UTF-8
// replaced by U+FFFD (JSON strings are Unicode; such a name cannot be
// represented exactly, and is never a reason to fail the output).
template <typename Json>
std::string json_text(const Json& doc) {
  return doc.dump(2, ' ', true, Json::error_handler_t::replace);
}

// The same on one line (a document per rank of `--comm`).
template <typename Json>
std::string json_line(const Json& doc) {
  return doc.dump(-1, ' ', true, Json::error_handler_t::replace);
}

}  // namespace ballast::cli
