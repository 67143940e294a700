// Device pointers and other addresses in error messages: "0x7f12ab340000".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ballast {

inline std::string hex(std::uint64_t value) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace ballast
