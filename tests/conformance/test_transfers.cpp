#include "conformance/conformance.hpp"

#include <algorithm>
#include <vector>

using namespace conformance;

namespace {

std::vector<std::byte> slice(const std::vector<std::byte>& v, std::size_t offset, std::size_t bytes) {
  return {v.begin() + static_cast<std::ptrdiff_t>(offset), v.begin() + static_cast<std::ptrdiff_t>(offset + bytes)};
}

}  // namespace

TEST_CASE("transfers: host to device, device to host and device to device, with offsets") {
  LeakCheck leaks;
  auto& g = gpu();
  constexpr std::uint64_t kBytes = 1 << 20;
  const auto base = random_bytes(kBytes, 1);
  DeviceBuffer a = upload(base);
  DeviceBuffer b = allocate(kBytes);
  REQUIRE(g.copy_to_device(b.ptr(), 0, std::vector<std::byte>(kBytes, std::byte{0})).ok());

  SUBCASE("odd sizes at odd offsets, both through the offset and through an interior pointer") {
    std::vector<std::byte> expected_a = base;
    std::uint64_t seed = 10;
    for (std::uint64_t offset : std::initializer_list<std::uint64_t>{0, 1, 3, 4095, 65537, kBytes - 5}) {
      for (std::uint64_t bytes : {1ull, 3ull, 5ull, 333ull, 4097ull}) {
        if (offset + bytes > kBytes) continue;
        CAPTURE(offset);
        CAPTURE(bytes);
        const auto data = random_bytes(bytes, ++seed);
        const bool interior = seed % 2 == 0;
        const auto s = interior ? g.copy_to_device(a.ptr() + offset, 0, data) : g.copy_to_device(a.ptr(), offset, data);
        REQUIRE_MESSAGE(s.ok(), describe(s));
        std::copy(data.begin(), data.end(), expected_a.begin() + static_cast<std::ptrdiff_t>(offset));
        CHECK(download(a.ptr(), bytes, offset) == data);
        CHECK(download(a.ptr() + offset, bytes) == data);
      }
    }
    CHECK(download(a.ptr(), kBytes) == expected_a);  // nothing outside the ranges was touched
  }

  SUBCASE("device to device with offsets on both sides") {
    std::vector<std::byte> expected_b(kBytes, std::byte{0});
    struct Copy {
      std::uint64_t dst_offset, src_offset, bytes;
    };
    for (const Copy c : {Copy{0, 0, 1}, Copy{1, 7, 13}, Copy{4096, 3, 4099}, Copy{100001, 99999, 65536},
                         Copy{kBytes - 17, 5, 17}, Copy{0, kBytes - 1000, 1000}}) {
      CAPTURE(c.dst_offset);
      CAPTURE(c.src_offset);
      CAPTURE(c.bytes);
      const auto s = g.copy_device(b.ptr(), c.dst_offset, a.ptr(), c.src_offset, c.bytes);
      REQUIRE_MESSAGE(s.ok(), describe(s));
      std::copy_n(base.begin() + static_cast<std::ptrdiff_t>(c.src_offset), c.bytes,
                  expected_b.begin() + static_cast<std::ptrdiff_t>(c.dst_offset));
      CHECK(download(b.ptr(), c.bytes, c.dst_offset) == slice(base, c.src_offset, c.bytes));
    }
    // Interior pointers on both sides.
    REQUIRE(g.copy_device(b.ptr() + 512, 0, a.ptr() + 2048, 0, 300).ok());
    std::copy_n(base.begin() + 2048, 300, expected_b.begin() + 512);
    CHECK(download(b.ptr(), kBytes) == expected_b);
    CHECK(download(a.ptr(), kBytes) == base);  // the source is untouched
  }

  SUBCASE("zero-byte transfers succeed and change nothing") {
    CHECK(g.copy_to_device(a.ptr(), 17, {}).ok());
    CHECK(g.copy_to_host({}, a.ptr(), 17).ok());
    CHECK(g.copy_device(b.ptr(), 3, a.ptr(), 5, 0).ok());
    CHECK(download(a.ptr(), kBytes) == base);
  }

  SUBCASE("ranges past the end of an allocation, and unknown pointers, are errors") {
    std::vector<std::byte> two(2);
    CHECK_FALSE(g.copy_to_device(a.ptr(), kBytes - 1, two).ok());
    CHECK_FALSE(g.copy_to_device(a.ptr() + kBytes - 1, 0, two).ok());
    CHECK_FALSE(g.copy_to_host(two, a.ptr(), kBytes - 1).ok());
    CHECK_FALSE(g.copy_to_host(two, a.ptr(), ~0ull).ok());
    CHECK_FALSE(g.copy_device(b.ptr(), 0, a.ptr(), kBytes - 1, 2).ok());
    CHECK_FALSE(g.copy_device(b.ptr(), kBytes - 1, a.ptr(), 0, 2).ok());
    CHECK_FALSE(g.copy_device(b.ptr(), 0, a.ptr(), 0, kBytes + 1).ok());
    CHECK_FALSE(g.copy_to_host(two, 0, 0).ok());
    CHECK_FALSE(g.copy_to_device(0xdead0000ull, 0, two).ok());
    CHECK(download(a.ptr(), kBytes) == base);
  }
}
