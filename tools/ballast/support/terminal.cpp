#include "support/terminal.hpp"

#include <ballast/printable.hpp>

#include <iostream>

namespace ballast::cli {

namespace {
// Held back at most this long waiting for a line end, so a long line
// without one is still written as it comes.
constexpr std::size_t kFlushAt = 4096;
}  // namespace

EscapingStreambuf::~EscapingStreambuf() { forward(true); }

EscapingStreambuf::int_type EscapingStreambuf::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  const char ch = traits_type::to_char_type(c);
  xsputn(&ch, 1);
  return c;
}

std::streamsize EscapingStreambuf::xsputn(const char* s, std::streamsize n) {
  pending_.append(s, static_cast<std::size_t>(n));
  if (pending_.size() >= kFlushAt || pending_.find('\n') != std::string::npos) forward(false);
  return n;
}

int EscapingStreambuf::sync() {
  forward(false);
  return target_->pubsync();
}

void EscapingStreambuf::forward(bool all) {
  if (pending_.empty()) return;
  const std::size_t ready = all ? pending_.size() : printable_complete_prefix(pending_);
  std::string out;
  append_printable(out, std::string_view(pending_).substr(0, ready), PrintableMode::stream);
  pending_.erase(0, ready);
  target_->sputn(out.data(), static_cast<std::streamsize>(out.size()));
}

TerminalGuard::TerminalGuard()
    : cout_(std::cout.rdbuf()),
      cerr_(std::cerr.rdbuf()),
      cout_filter_(std::make_unique<EscapingStreambuf>(cout_)),
      cerr_filter_(std::make_unique<EscapingStreambuf>(cerr_)) {
  std::cout.rdbuf(cout_filter_.get());
  std::cerr.rdbuf(cerr_filter_.get());
}

TerminalGuard::~TerminalGuard() {
  std::cout.flush();
  std::cerr.flush();
  std::cout.rdbuf(cout_);
  std::cerr.rdbuf(cerr_);
  cout_filter_.reset();  // writes what an unfinished character held back
  cerr_filter_.reset();
  std::cout.flush();
  std::cerr.flush();
}

}  // namespace ballast::cli
