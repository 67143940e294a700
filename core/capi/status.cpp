// ballast_status: allocation, the accessors, and the ErrorCode mapping.
#include "capi/status.hpp"

namespace ballast::capi {

namespace {
// Returned when a status itself cannot be allocated; freeing it is a no-op.
ballast_status g_out_of_memory{BALLAST_E_OUT_OF_MEMORY, "out_of_memory: cannot allocate a status", true};
}  // namespace

ballast_status* make_status(ballast_code code, std::string message) noexcept {
  try {
    auto* s = new ballast_status;
    s->code = code;
    s->message = std::move(message);
    return s;
  } catch (...) {
    return &g_out_of_memory;
  }
}

ballast_status* from_error(const Error& error) noexcept {
  // ballast_code mirrors ErrorCode value for value (ballast.h says so).
  try {
    return make_status(static_cast<ballast_code>(error.code), error.to_string());
  } catch (...) {
    return &g_out_of_memory;
  }
}

ballast_status* invalid_argument(std::string message) noexcept {
  return make_status(BALLAST_E_INVALID_ARGUMENT, std::move(message));
}
ballast_status* out_of_bounds(std::string message) noexcept {
  return make_status(BALLAST_E_OUT_OF_BOUNDS, std::move(message));
}

static_assert(static_cast<int>(ErrorCode::internal) == BALLAST_E_INTERNAL);
static_assert(static_cast<int>(ErrorCode::checksum_mismatch) == BALLAST_E_CHECKSUM_MISMATCH);
static_assert(static_cast<int>(ErrorCode::out_of_memory) == BALLAST_E_OUT_OF_MEMORY);
static_assert(static_cast<int>(ErrorCode::invalid_argument) == BALLAST_E_INVALID_ARGUMENT);

}  // namespace ballast::capi

extern "C" {

ballast_code ballast_status_code(const ballast_status* s) { return s == nullptr ? BALLAST_OK : s->code; }

const char* ballast_status_message(const ballast_status* s) { return s == nullptr ? "ok" : s->message.c_str(); }

void ballast_status_free(ballast_status* s) {
  if (s != nullptr && !s->is_static) delete s;
}

}  // extern "C"
