// Element access to little-endian byte buffers, for the reference
// implementations and their comparisons (one definition for both files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace ballast::reference {

// Element `index` of a buffer of T.
template <class T>
T load(std::span<const std::byte> bytes, std::uint64_t index) {
  T v;
  std::memcpy(&v, bytes.data() + index * sizeof(T), sizeof(T));
  return v;
}

// Writes element `index` of a buffer of T.
template <class T>
void store(std::vector<std::byte>& bytes, std::uint64_t index, T v) {
  std::memcpy(bytes.data() + index * sizeof(T), &v, sizeof(T));
}

}  // namespace ballast::reference
