// ballast_printable(): the command line's escaping for bindings and C
// engines, so a name from a model is shown safely by one implementation
// (ballast::printable, core/base/printable.cpp) and not re-written in each
// language, where two copies could drift apart.
#include "capi/status.hpp"

#include <ballast/ballast.h>
#include <ballast/printable.hpp>

#include <cstring>
#include <string>
#include <string_view>

using namespace ballast;

extern "C" ballast_status* ballast_printable(const char* text, size_t length, char* out, size_t capacity,
                                             size_t* needed) {
  return capi::guarded([&]() -> ballast_status* {
    if (text == nullptr && length != 0)
      return capi::invalid_argument("invalid_argument: text is NULL with length " + std::to_string(length));
    const bool query = out == nullptr && capacity == 0;
    if (out == nullptr && !query)
      return capi::invalid_argument("invalid_argument: out is NULL with capacity " + std::to_string(capacity));
    if (query && needed == nullptr)
      return capi::invalid_argument("invalid_argument: a size query (out NULL, capacity 0) needs `needed`");
    const std::string escaped = printable(std::string_view(text == nullptr ? "" : text, length));
    if (!query && capacity <= escaped.size())
      return capi::out_of_bounds("out_of_bounds: the escaped text is " + std::to_string(escaped.size()) +
                                 " bytes and a NUL; capacity is " + std::to_string(capacity));
    if (!query) std::memcpy(out, escaped.c_str(), escaped.size() + 1);
    if (needed != nullptr) *needed = escaped.size();
    return nullptr;
  });
}
