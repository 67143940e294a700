// The checks shared by every entry point.
#include "capi/objects.hpp"

namespace ballast::capi {

ballast_status* bad_handle(Kind kind, const void* handle) noexcept {
  try {
    if (handle == nullptr)
      return make_status(BALLAST_E_INVALID_HANDLE, std::string("invalid_handle: the ") + kind_name(kind) + " is NULL");
    return make_status(BALLAST_E_INVALID_HANDLE, std::string("invalid_handle: not a live ") + kind_name(kind) +
                                                     " handle (freed already, or a handle of another kind)");
  } catch (...) {
    return make_status(BALLAST_E_INVALID_HANDLE, "invalid_handle");
  }
}

ballast_status* check_buffer(const void* dst, std::size_t dst_length, std::uint64_t length) noexcept {
  if (dst == nullptr && length > 0) return invalid_argument("invalid_argument: the destination buffer is NULL");
  if (length > dst_length)
    return out_of_bounds("out_of_bounds: " + std::to_string(length) + " bytes do not fit the buffer of " +
                         std::to_string(dst_length) + " bytes");
  return nullptr;
}

ballast_status* check_index(std::size_t index, std::size_t count, const char* what) noexcept {
  if (index < count) return nullptr;
  try {
    return out_of_bounds(std::string("out_of_bounds: ") + what + " " + std::to_string(index) + " of " +
                         std::to_string(count));
  } catch (...) {
    return make_status(BALLAST_E_OUT_OF_BOUNDS, "out_of_bounds");
  }
}

}  // namespace ballast::capi
