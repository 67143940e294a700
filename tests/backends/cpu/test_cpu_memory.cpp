// Transfers and host registration on the CPU backend: registration is the
// identity, read-only ranges are never written, and every range is checked.
#include "cpu_test_support.hpp"

#include "cpu/kernels.hpp"

#include <algorithm>
#include <numeric>

using namespace ballast;
using cpu_test::bytes_of;
using cpu_test::download;
using cpu_test::open_cpu;

TEST_CASE("transfers with offsets, and range errors") {
  auto b = open_cpu();
  auto p = b->allocate(64);
  REQUIRE(p.ok());
  std::vector<std::byte> data(16);
  std::iota(reinterpret_cast<unsigned char*>(data.data()), reinterpret_cast<unsigned char*>(data.data()) + 16, 1);
  REQUIRE(b->copy_to_device(*p, 48, data).ok());
  std::vector<std::byte> back(8);
  REQUIRE(b->copy_to_host(back, *p, 52).ok());
  CHECK(std::to_integer<int>(back[0]) == 5);
  CHECK(b->copy_device(*p, 0, *p, 48, 16).ok());
  CHECK(download(*b, *p, 16) == data);
  CHECK(b->copy_device(*p, 4, *p, 0, 16).code() == ErrorCode::invalid_argument);  // overlapping: refused everywhere

  const Status past = b->copy_to_device(*p, 56, data);
  CHECK(past.code() == ErrorCode::out_of_bounds);
  CHECK(past.to_string().find("runs past the end of its allocation") != std::string::npos);
  CHECK(b->copy_to_host(back, *p, ~0ull - 2).code() == ErrorCode::overflow);
  CHECK(b->copy_to_host(back, 0, 0).code() == ErrorCode::invalid_argument);
  CHECK(b->copy_to_host(back, 0x10, 0).code() == ErrorCode::invalid_argument);
  CHECK(b->copy_device(*p, 0, *p, 60, 8).code() == ErrorCode::out_of_bounds);
  CHECK(b->copy_to_device(*p, 64, {}).ok());  // empty copy at the end is fine
  CHECK(b->free(*p).ok());
  CHECK(b->copy_to_host(back, *p, 0).code() == ErrorCode::invalid_argument);  // after free
}

TEST_CASE("a large device copy uses the pool and copies every byte") {
  auto b = open_cpu({{"threads", "3"}});
  const std::uint64_t n = (5u << 20) + 123;
  std::vector<std::byte> data(n);
  for (std::uint64_t i = 0; i < n; ++i) data[i] = static_cast<std::byte>(i * 7 + (i >> 12));
  const DevicePtr src = cpu_test::upload(*b, data);
  auto dst = b->allocate(n);
  REQUIRE(dst.ok());
  REQUIRE(b->copy_device(*dst, 0, src, 0, n).ok());
  CHECK(download(*b, *dst, n) == data);
  CHECK(b->free(src).ok());
  CHECK(b->free(*dst).ok());
}

TEST_CASE("copies large enough to stream copy every byte, from and to any alignment, with every kernel table") {
  // kStreamBytes and more: each 1 MiB piece streams from its first 32-byte
  // (AVX2) or 64-byte (AVX-512) aligned destination byte, the head and the
  // tail copied plainly. "on" is the AVX-512 table where the CPU has one.
  for (const char* simd : {"on", "avx2", "off"}) {
    auto b = open_cpu({{"threads", "2"}, {"simd", simd}});
    const std::uint64_t n = cpu::kStreamBytes + (1u << 20) + 77;
    std::vector<std::byte> data(n + 64);
    for (std::uint64_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 13 + (i >> 11));
    const DevicePtr src = cpu_test::upload(*b, data);
    auto dst = b->allocate(n + 64);
    REQUIRE(dst.ok());
    for (auto [to, from] :
         {std::pair<std::uint64_t, std::uint64_t>{0, 0}, {5, 0}, {31, 7}, {32, 33}, {47, 64}, {63, 1}}) {
      REQUIRE(b->copy_device(*dst, to, src, from, n).ok());
      const auto back = download(*b, *dst + to, n);
      CHECK_MESSAGE(std::equal(back.begin(), back.end(), data.begin() + static_cast<std::ptrdiff_t>(from)),
                    "simd " << simd << ", copy_device to +" << to << " from +" << from);
      // The same through an upload and a download.
      REQUIRE(b->copy_to_device(*dst, to, std::span(data).subspan(from, n)).ok());
      std::vector<std::byte> host(n + 32);
      REQUIRE(b->copy_to_host(std::span(host).subspan(to % 32, n), *dst, to).ok());
      CHECK_MESSAGE(std::equal(host.begin() + static_cast<std::ptrdiff_t>(to % 32),
                               host.begin() + static_cast<std::ptrdiff_t>(to % 32 + n),
                               data.begin() + static_cast<std::ptrdiff_t>(from)),
                    "simd " << simd << ", upload and download at +" << to << " from +" << from);
    }
    CHECK(b->free(src).ok());
    CHECK(b->free(*dst).ok());
  }
}

TEST_CASE("host registration is the identity and honours read-only") {
  auto b = open_cpu();
  const std::vector<float> weights = {1.0f, -2.0f, 0.5f, 65504.0f};
  const std::vector<std::byte> before = bytes_of(weights);
  auto reg = b->register_host(weights.data(), 16, HostAccess::read_only);
  REQUIRE(reg.ok());
  CHECK(*reg == reinterpret_cast<std::uintptr_t>(weights.data()));  // zero-copy: the same address
  CHECK(b->counters().live_registrations == 1);

  // Readable through the registration, by copies and by kernels.
  std::vector<std::byte> back(8);
  CHECK(b->copy_to_host(back, *reg, 8).ok());
  auto out = b->allocate(8);
  REQUIRE(out.ok());
  DerivationLaunch l;
  l.kind = Derivation::to_f16;
  l.src_type = DataType::float32;
  l.rows = 1;
  l.cols = 4;
  l.src = *reg;
  l.dst = *out;
  CHECK(b->launch(l).ok());
  CHECK(b->synchronize().ok());
  CHECK(download(*b, *out, 8) == bytes_of<std::uint16_t>({0x3c00, 0xc000, 0x3800, 0x7bff}));

  // Never written: copies and kernel outputs into it are refused.
  const std::vector<std::byte> junk(4, std::byte{0xff});
  const Status write = b->copy_to_device(*reg, 0, junk);
  CHECK(write.code() == ErrorCode::invalid_argument);
  CHECK(write.to_string().find("read-only") != std::string::npos);
  CHECK(b->copy_device(*reg, 4, *out, 0, 4).code() == ErrorCode::invalid_argument);
  l.src = *out;
  l.rows = 1;
  l.cols = 2;
  l.kind = Derivation::transpose;
  l.src_type = DataType::uint16;
  l.dst = *reg;
  CHECK(b->launch(l).code() == ErrorCode::invalid_argument);
  CHECK(bytes_of(weights) == before);

  // Reading past the registered range is refused.
  CHECK(b->copy_to_host(back, *reg, 12).code() == ErrorCode::out_of_bounds);

  CHECK(b->unregister_host(*reg).ok());
  CHECK(b->unregister_host(*reg).code() == ErrorCode::invalid_argument);
  CHECK(b->copy_to_host(back, *reg, 0).code() == ErrorCode::invalid_argument);
  CHECK(b->counters().live_registrations == 0);
  CHECK(b->free(*out).ok());
}

TEST_CASE("read-write registrations, repeated and unaligned ranges") {
  auto b = open_cpu();
  std::vector<std::byte> buffer(100);
  auto rw = b->register_host(buffer.data() + 3, 50, HostAccess::read_write);  // import_alignment 1: any start
  REQUIRE(rw.ok());
  CHECK(*rw == reinterpret_cast<std::uintptr_t>(buffer.data() + 3));
  const std::vector<std::byte> two(2, std::byte{7});
  CHECK(b->copy_to_device(*rw, 48, two).ok());
  CHECK(buffer[51] == std::byte{7});
  CHECK(b->copy_to_device(*rw, 49, two).code() == ErrorCode::out_of_bounds);

  // The same start registered twice: each unregister removes one.
  auto again = b->register_host(buffer.data() + 3, 10, HostAccess::read_only);
  REQUIRE(again.ok());
  CHECK(b->counters().live_registrations == 2);
  CHECK(b->copy_to_device(*rw, 0, two).code() == ErrorCode::invalid_argument);  // now overlaps read-only
  CHECK(b->unregister_host(*again).ok());
  CHECK(b->copy_to_device(*rw, 0, two).ok());
  CHECK(b->unregister_host(*rw).ok());
  CHECK(b->counters().live_registrations == 0);

  CHECK(b->register_host(nullptr, 4, HostAccess::read_only).code() == ErrorCode::invalid_argument);
  CHECK(b->unregister_host(0x1000).code() == ErrorCode::invalid_argument);
}
