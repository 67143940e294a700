// Zero-copy host registration against a real read-only file mapping: the
// way a weight store hands a model's weights to a device.
#include "conformance/conformance.hpp"

#include <reference/reference.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace conformance;
using ballast::DataType;
using ballast::Derivation;
using ballast::DerivationLaunch;
using ballast::ErrorCode;
using ballast::HostAccess;

namespace {

// A file with known contents, mapped PROT_READ: any write through the
// mapping (by the backend or a kernel) would fault instead of passing.
class ReadOnlyMapping {
 public:
  explicit ReadOnlyMapping(const std::vector<std::byte>& contents) {
    path_ = std::filesystem::temp_directory_path() /
            ("ballast-conformance-" + std::to_string(::getpid()) + "-" + std::to_string(next_id()) + ".bin");
    {
      std::ofstream out(path_, std::ios::binary);
      out.write(reinterpret_cast<const char*>(contents.data()), static_cast<std::streamsize>(contents.size()));
      REQUIRE(out.good());
    }
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    void* p = ::mmap(nullptr, contents.size(), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(p != MAP_FAILED);
    data_ = static_cast<const std::byte*>(p);
    size_ = contents.size();
  }
  ~ReadOnlyMapping() {
    ::munmap(const_cast<std::byte*>(data_), size_);
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  ReadOnlyMapping(const ReadOnlyMapping&) = delete;
  ReadOnlyMapping& operator=(const ReadOnlyMapping&) = delete;

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  static int next_id() {
    static int id = 0;
    return id++;
  }
  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// One registration, unregistered (and checked) on destruction.
class Registration {
 public:
  Registration(const void* host, std::uint64_t bytes, HostAccess access) {
    auto r = gpu().register_host(host, bytes, access);
    REQUIRE_MESSAGE(r.ok(), "register_host(" << bytes << " bytes): " << describe(r.status()));
    ptr_ = *r;
  }
  ~Registration() {
    const auto s = gpu().unregister_host(ptr_);
    CHECK_MESSAGE(s.ok(), "unregister_host: " << describe(s));
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  DevicePtr ptr() const { return ptr_; }

 private:
  DevicePtr ptr_ = 0;
};

// Transposes the [rows, cols] f32 matrix at device address `src` and checks
// it against the reference run on the same host bytes.
void check_transpose_reads(DevicePtr src, const std::byte* host, std::uint64_t rows, std::uint64_t cols) {
  DerivationLaunch l;
  l.kind = Derivation::transpose;
  l.src_type = DataType::float32;
  l.rows = rows;
  l.cols = cols;
  const std::uint64_t bytes = rows * cols * 4;
  DeviceBuffer dst = allocate(bytes);
  l.src = src;
  l.dst = dst.ptr();
  const auto launched = gpu().launch(l);
  REQUIRE_MESSAGE(launched.ok(), describe(launched));
  const auto synced = gpu().synchronize();
  REQUIRE_MESSAGE(synced.ok(), describe(synced));
  auto expected = ballast::reference::derive(l, {std::span<const std::byte>(host, bytes), {}, {}});
  REQUIRE(expected.ok());
  const auto got = download(dst.ptr(), bytes);
  const auto cmp = ballast::reference::compare(l, *expected, got, {});
  CHECK_MESSAGE(cmp.ok, cmp.message);
}

constexpr std::uint64_t kFileBytes = (3u << 20) + 4096 * 5 + 123;  // not a whole number of pages

}  // namespace

TEST_CASE("host registration: a read-only file mapping read in place by copies and kernels") {
  LeakCheck leaks;
  auto& g = gpu();
  const auto& caps = g.capabilities();
  const auto contents = random_bytes(kFileBytes, 42);
  ReadOnlyMapping map(contents);
  const std::byte* base = map.data();

  if (!caps.host_registration) {
    auto r = g.register_host(base, map.size(), HostAccess::read_only);
    CHECK_FALSE(r.ok());
    CHECK_MESSAGE(r.code() == ErrorCode::unsupported, describe(r.status()));
    CHECK(g.counters().live_registrations == 0);
    MESSAGE("skipped: backend has no host registration (" << caps.host_registration_note << "); checked that it says so");
    return;
  }
  if (!caps.read_only_registration) {
    auto r = g.register_host(base, map.size(), HostAccess::read_only);
    CHECK_FALSE(r.ok());
    CHECK_MESSAGE(r.code() == ErrorCode::unsupported, describe(r.status()));
    MESSAGE("skipped: backend cannot register read-only memory; checked that it refuses");
    return;
  }
  // A driver may still refuse these particular pages: NVIDIA's Vulkan
  // driver pins imported pages for writing and so refuses a write-protected
  // file mapping (seen on an H200). It must say `unsupported`, which is what
  // makes DeviceWeights upload instead, and leave nothing registered.
  {
    auto probe = g.register_host(base, map.size(), HostAccess::read_only);
    if (!probe.ok()) {
      CHECK_MESSAGE(probe.code() == ErrorCode::unsupported, describe(probe.status()));
      CHECK(g.counters().live_registrations == 0);
      MESSAGE("skipped: the driver refuses to register a read-only file mapping (" << describe(probe.status())
                                                                                   << "); checked that it says unsupported");
      return;
    }
    CHECK(g.unregister_host(*probe).ok());
  }

  SUBCASE("register, read, unregister, register again") {
    const auto before = g.counters();
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      Registration reg(base, map.size(), HostAccess::read_only);
      CHECK(g.counters().live_registrations == before.live_registrations + 1);
      CHECK(download(reg.ptr(), 4096) == std::vector<std::byte>(contents.begin(), contents.begin() + 4096));
      CHECK(download(reg.ptr(), 1000, map.size() - 1000) ==
            std::vector<std::byte>(contents.end() - 1000, contents.end()));
      check_transpose_reads(reg.ptr(), base, 256, 300);
    }
    CHECK(g.counters().live_registrations == before.live_registrations);
  }

  SUBCASE("a weight straddling the middle of the mapping, read through base + offset") {
    Registration reg(base, map.size(), HostAccess::read_only);
    const std::uint64_t rows = 96, cols = 70;  // 26880 bytes
    const std::uint64_t offset = ((map.size() / 2 - rows * cols * 2) / 16) * 16 + 16 * 7;
    REQUIRE(offset < map.size() / 2);
    REQUIRE(offset + rows * cols * 4 > map.size() / 2);
    check_transpose_reads(reg.ptr() + offset, base + offset, rows, cols);
  }

  SUBCASE("sub-ranges that do not start or end on the import alignment") {
    // Offsets stay 16-byte aligned so kernels may read f32 from them; they
    // are deliberately off the import alignment.
    const auto down16 = [](std::uint64_t v) { return v / 16 * 16; };
    const std::uint64_t align = std::min<std::uint64_t>(caps.import_alignment, 1u << 20);
    struct Range {
      std::uint64_t offset, bytes;
    };
    for (const Range r : {Range{16, 4096 * 3 + 48}, Range{std::max<std::uint64_t>(align, 16) + 48, 12345 * 4},
                          Range{down16(map.size() / 2) + 32, 40000},
                          Range{down16(map.size() - 10000 * 4 - 13), 10000 * 4 + 13}}) {
      CAPTURE(r.offset);
      CAPTURE(r.bytes);
      Registration reg(base + r.offset, r.bytes, HostAccess::read_only);
      const std::vector<std::byte> expected(contents.begin() + static_cast<std::ptrdiff_t>(r.offset),
                                            contents.begin() + static_cast<std::ptrdiff_t>(r.offset + r.bytes));
      CHECK(download(reg.ptr(), r.bytes) == expected);
      check_transpose_reads(reg.ptr(), base + r.offset, 4, r.bytes / 16);
    }
  }

  SUBCASE("two registrations of overlapping ranges live side by side") {
    Registration whole(base, map.size(), HostAccess::read_only);
    Registration part(base + 4096 + 16, 8192, HostAccess::read_only);
    CHECK(download(part.ptr(), 8192) == download(whole.ptr(), 8192, 4096 + 16));
  }

  SUBCASE("read-only is honoured: writes through the registration are refused") {
    Registration reg(base, map.size(), HostAccess::read_only);
    const std::vector<std::byte> data(64, std::byte{0x5a});
    CHECK_FALSE(g.copy_to_device(reg.ptr(), 0, data).ok());
    DeviceBuffer src = upload(data);
    CHECK_FALSE(g.copy_device(reg.ptr(), 128, src.ptr(), 0, 64).ok());
    DerivationLaunch l;
    l.kind = Derivation::transpose;
    l.src_type = DataType::float32;
    l.rows = 4;
    l.cols = 4;
    l.src = src.ptr();
    l.dst = reg.ptr() + 256;
    const auto launched = g.launch(l);
    const auto synced = g.synchronize();
    CHECK_MESSAGE((!launched.ok() || !synced.ok()), "a kernel was allowed to write into read-only memory");
    CHECK(download(reg.ptr(), 4096) == std::vector<std::byte>(contents.begin(), contents.begin() + 4096));
  }

  SUBCASE("bad registrations are errors") {
    CHECK_FALSE(g.register_host(nullptr, 4096, HostAccess::read_only).ok());
    CHECK_FALSE(g.unregister_host(0xdead0000ull).ok());
    auto r = g.register_host(base, 4096, HostAccess::read_only);
    REQUIRE(r.ok());
    REQUIRE(g.unregister_host(*r).ok());
    CHECK_FALSE(g.unregister_host(*r).ok());
    // A registration is not an allocation.
    auto again = g.register_host(base, 4096, HostAccess::read_only);
    REQUIRE(again.ok());
    CHECK_FALSE(g.free(*again).ok());
    CHECK(g.unregister_host(*again).ok());
  }

  SUBCASE("two registrations from one start: each owner ends its own, in any order") {
    // Two owners of one mapping (two DeviceWeights planning other ranges)
    // may register from the same byte; where the device pointer is the
    // host address both get one pointer. By size and access, the first
    // owner's end leaves the second's whole range readable.
    auto page = g.register_host(base, 4096, HostAccess::read_only);
    REQUIRE(page.ok());
    auto three = g.register_host(base, 3 * 4096, HostAccess::read_only);
    if (!three.ok()) {  // a driver that refuses overlapping registrations: no shared start to tell apart
      MESSAGE("overlapping registration refused: " << describe(three.status()));
      CHECK(g.unregister_host(*page, 4096, HostAccess::read_only).ok());
      return;
    }
    CHECK_FALSE(g.unregister_host(*page, 2 * 4096, HostAccess::read_only).ok());  // no such registration
    CHECK_FALSE(g.unregister_host(*page, 4096, HostAccess::read_write).ok());
    REQUIRE(g.unregister_host(*page, 4096, HostAccess::read_only).ok());
    CHECK(download(*three, 64, 2 * 4096) ==
          std::vector<std::byte>(contents.begin() + 2 * 4096, contents.begin() + 2 * 4096 + 64));
    REQUIRE(g.unregister_host(*three, 3 * 4096, HostAccess::read_only).ok());
    CHECK_FALSE(g.unregister_host(*three, 3 * 4096, HostAccess::read_only).ok());  // ended already
  }
}
