// The fuzz input of fuzz_launch_validation, read as the format at the top
// of that file describes: little-endian, zeros past the end.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace fuzz {

using u64 = std::uint64_t;
using u128 = unsigned __int128;

inline constexpr u128 kMax64 = std::numeric_limits<u64>::max();

// Where arithmetic on shapes wraps or nearly does.
// clang-format off
inline constexpr std::array<u64, 16> kEdges = {
    256,          4096,         8193,         u64{1} << 16, u64{1} << 31, u64{1} << 32, (u64{1} << 32) + 1,
    u64{1} << 61, u64{1} << 62, u64{1} << 63, ~u64{0},      ~u64{0} - 1,  ~u64{0} - 6,  ~u64{0} - 7,
    ~u64{0} - 15, (~u64{0} >> 1) + 2,
};
// clang-format on

class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() { return u16() | (static_cast<std::uint32_t>(u16()) << 16); }
  u64 u64v() { return u32() | (static_cast<u64>(u32()) << 32); }
  u64 count() {
    const std::uint8_t c = u8();
    if (c < 0xE0) return c;
    if (c < 0xF0) return kEdges[c - 0xE0];
    if (c < 0xF8) return u16();
    return u64v();
  }
  std::uint32_t block_size() {
    const std::uint8_t b = u8();
    return b < 0x80 ? std::uint32_t{1} << (b % 32) : u32();
  }
  u64 alignment() {
    const std::uint8_t a = u8();
    return a < 0xF0 ? u64{1} << (a % 13) : a;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace fuzz
