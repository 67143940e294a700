// Where ballast's own messages go: validation-layer reports, fallbacks
// (a mapping uploaded because a backend refused to register it), anything
// said outside a returned error. Default: one line on stderr each. An engine
// routes them into its own log with set_log_sink().
#pragma once

#include <ballast/export.hpp>
#include <functional>
#include <string_view>

BALLAST_API_BEGIN

namespace ballast {

enum class LogLevel { info, warning, error };

struct LogMessage {
  LogLevel level = LogLevel::info;
  std::string_view source;  // who speaks: "vulkan", "device weights", ...
  std::string_view text;    // one line, no trailing newline
};

using LogSink = std::function<void(const LogMessage&)>;

// Replaces the sink for the whole process; an empty sink restores stderr.
// Thread-safe; the sink may be called from any thread, one call at a time,
// sometimes while ballast holds a lock of its own: it must return quickly
// and must not call back into ballast.
void set_log_sink(LogSink sink);

// Sends one message to the sink (ballast and its plugins use this).
void log_message(LogLevel level, std::string_view source, std::string_view text);

std::string_view log_level_name(LogLevel level) noexcept;

}  // namespace ballast

BALLAST_API_END
