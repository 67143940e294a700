// The version query, the check an engine makes once, and the log sink.
#include "capi/status.hpp"

#include <ballast/ballast.h>
#include <ballast/log.hpp>
#include <ballast/version.hpp>

#include <string>

using namespace ballast;

extern "C" {

uint32_t ballast_c_api_version(void) { return BALLAST_C_API_VERSION; }

const char* ballast_library_version(void) { return BALLAST_VERSION_STRING; }

ballast_status* ballast_check_version(uint32_t version) {
  // Version N's symbols and struct fields are all present in every later
  // version (only appended), so any version up to ours is served.
  if (version >= 1 && version <= BALLAST_C_API_VERSION) return nullptr;
  if (version == 0)  // not a version any header defines: a caller that passed an unset value
    return capi::make_status(BALLAST_E_INVALID_ARGUMENT,
                             "invalid_argument: C API version 0 is no version; pass BALLAST_C_API_VERSION, the "
                             "version of the ballast.h the caller was built with (this libballast provides 1 to " +
                                 std::to_string(BALLAST_C_API_VERSION) + ")");
  return capi::make_status(BALLAST_E_ABI_MISMATCH, "abi_mismatch: this libballast provides C API version " +
                                                       std::to_string(BALLAST_C_API_VERSION) + ", the caller needs " +
                                                       std::to_string(version));
}

ballast_status* ballast_set_log_sink(ballast_log_fn fn, void* user) {
  return capi::guarded([&]() -> ballast_status* {
    if (fn == nullptr) {
      set_log_sink({});
      return nullptr;
    }
    // The C++ sink hands out string_views; C wants NUL-terminated strings.
    set_log_sink([fn, user](const LogMessage& m) {
      const std::string source(m.source), text(m.text);
      const auto level = m.level == LogLevel::error     ? BALLAST_LOG_ERROR
                         : m.level == LogLevel::warning ? BALLAST_LOG_WARNING
                                                        : BALLAST_LOG_INFO;
      fn(user, level, source.c_str(), text.c_str());
    });
    return nullptr;
  });
}

}  // extern "C"
