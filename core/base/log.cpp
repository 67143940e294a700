#include <ballast/log.hpp>
#include <ballast/printable.hpp>

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

namespace ballast {
namespace {

// One lock for the sink: calls are serialized, so a sink needs no locking
// of its own, and replacing it never races a call in progress.
std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}
LogSink& sink() {
  static LogSink s;
  return s;
}

}  // namespace

std::string_view log_level_name(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
  }
  return "?";
}

void set_log_sink(LogSink s) {
  std::lock_guard lock(sink_mutex());
  sink() = std::move(s);
}

void log_message(LogLevel level, std::string_view source, std::string_view text) {
  std::lock_guard lock(sink_mutex());
  if (sink()) {
    try {
      sink()(LogMessage{level, source, text});
    } catch (...) {
      // A sink that throws loses its message; ballast's caller goes on.
    }
    return;
  }
  // The text may carry a model's names: escaped, so it stays one line that
  // moves no cursor (printable.hpp). A sink an engine sets gets it raw.
  std::string line = "ballast ";
  append_printable(line, source);
  line += ": ";
  line += log_level_name(level);
  line += ": ";
  append_printable(line, text);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ballast
