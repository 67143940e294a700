// The C API's status object and the one wrapper every entry point runs in.
// A status is a heap object the caller frees; success is NULL, so the hot
// path allocates nothing.
#pragma once

#include <ballast/ballast.h>
#include <ballast/status.hpp>

#include <cstring>
#include <new>
#include <string>
#include <utility>

struct ballast_status {
  ballast_code code = BALLAST_E_INTERNAL;
  std::string message;
  bool is_static = false;  // the out-of-memory fallback: never freed
};

namespace ballast::capi {

// A status with `code` and `message`; when even that allocation fails,
// the static out-of-memory status (ballast_status_free ignores it).
ballast_status* make_status(ballast_code code, std::string message) noexcept;
// An Error as a status, its one-line to_string() as the message.
ballast_status* from_error(const Error& error) noexcept;
inline ballast_status* from_status(const Status& s) noexcept { return s.ok() ? nullptr : from_error(s.error()); }
ballast_status* invalid_argument(std::string message) noexcept;
ballast_status* out_of_bounds(std::string message) noexcept;

// Runs `body` (returning ballast_status*) so that nothing thrown inside
// ballast or the standard library crosses into C: an exception becomes a
// status (out_of_memory for bad_alloc, internal for the rest).
template <class Body>
ballast_status* guarded(Body&& body) noexcept {
  try {
    return std::forward<Body>(body)();
  } catch (const std::bad_alloc&) {
    return make_status(BALLAST_E_OUT_OF_MEMORY, "out_of_memory: allocation failed in the C API");
  } catch (const std::exception& e) {
    return make_status(BALLAST_E_INTERNAL, std::string("internal: ") + e.what());
  } catch (...) {
    return make_status(BALLAST_E_INTERNAL, "internal: unknown exception in the C API");
  }
}

// Copies the library's full output struct into the caller's, no further
// than the caller's `size` says its struct reaches (an older caller's
// struct is a prefix of ours). The caller's size must cover `size` itself.
template <class T>
ballast_status* write_out(const T& full, T* out) noexcept {
  if (out == nullptr) return invalid_argument("invalid_argument: output struct is NULL");
  const std::size_t caller = out->size;
  if (caller < sizeof(std::size_t)) return invalid_argument("invalid_argument: struct size is not set (BALLAST_INIT)");
  T copy = full;
  copy.size = caller < sizeof(T) ? caller : sizeof(T);
  std::memcpy(static_cast<void*>(out), &copy, copy.size);
  return nullptr;
}

// The reverse for inputs: the caller's fields up to its `size`, ours
// zero (the default) beyond. A size is the sizeof of some version of the
// struct, so a multiple of its alignment: any other cuts a field, whose
// first bytes alone would be read as a smaller value (a budget of 2^32
// read from 4 of its 8 bytes as 0), so it is refused.
template <class T>
bool read_in(const T* in, T& full) noexcept {
  full = T{};
  if (in == nullptr) return true;
  const std::size_t caller = in->size;
  if (caller < sizeof(std::size_t)) return false;
  if (caller < sizeof(T) && caller % alignof(T) != 0) return false;
  std::memcpy(static_cast<void*>(&full), in, caller < sizeof(T) ? caller : sizeof(T));
  full.size = sizeof(T);
  return true;
}

}  // namespace ballast::capi
