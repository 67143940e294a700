#include "support.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <numeric>

namespace ballast::vulkan::test {
namespace {

// A read-only, file-backed mapping of `bytes` bytes of known content.
struct MappedFile {
  std::string path;
  void* data = MAP_FAILED;
  std::size_t size = 0;

  explicit MappedFile(std::size_t bytes) : size(bytes) {
    char name[] = "/tmp/ballast-vulkan-import-XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    path = name;
    std::vector<std::uint8_t> content(bytes);
    for (std::size_t i = 0; i < bytes; ++i) content[i] = static_cast<std::uint8_t>(i * 7 + 3);
    REQUIRE(write(fd, content.data(), bytes) == static_cast<ssize_t>(bytes));
    data = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    REQUIRE(data != MAP_FAILED);
  }
  ~MappedFile() {
    if (data != MAP_FAILED) munmap(data, size);
    unlink(path.c_str());
  }
  const std::uint8_t* bytes() const { return static_cast<const std::uint8_t*>(data); }
};

}  // namespace

TEST_CASE("a read-only file mapping is imported, read in place by a kernel, and never written") {
  auto b = open();
  if (!b->capabilities().host_registration) {
    MESSAGE("host registration unsupported here: " << b->capabilities().host_registration_note);
    MappedFile file(4096);
    auto r = b->register_host(file.data, 4096, HostAccess::read_only);
    CHECK(r.code() == ErrorCode::unsupported);  // never a silent copy
    return;
  }
  MappedFile file(3 * 4096 + 100);
  // An unaligned range in the middle: 37 rows x 53 cols of bytes from offset 1001.
  const std::uint64_t offset = 1001, rows = 37, cols = 53;
  auto reg = b->register_host(file.bytes() + offset, rows * cols, HostAccess::read_only);
  INFO(reg.status().to_string());
  REQUIRE(reg.ok());
  CHECK(b->counters().live_registrations == 1);

  // The pointer points at the requested byte itself.
  CHECK(download<std::uint8_t>(*b, *reg, 5) ==
        std::vector<std::uint8_t>(file.bytes() + offset, file.bytes() + offset + 5));

  auto out = b->allocate(rows * cols, 256);
  REQUIRE(out.ok());
  DerivationLaunch l;
  l.kind = Derivation::transpose;
  l.src_type = DataType::uint8;
  l.rows = rows;
  l.cols = cols;
  l.src = *reg;
  l.dst = *out;
  REQUIRE(b->launch(l).ok());
  REQUIRE(b->synchronize().ok());
  const auto got = download<std::uint8_t>(*b, *out, rows * cols);
  std::size_t wrong = 0;
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint64_t c = 0; c < cols; ++c) wrong += got[c * rows + r] != file.bytes()[offset + r * cols + c];
  CHECK(wrong == 0);

  // Read-only: every write path refuses.
  std::vector<std::uint8_t> junk(8, 0xee);
  CHECK(b->copy_to_device(*reg, 0, std::as_bytes(std::span(junk))).code() == ErrorCode::invalid_argument);
  CHECK(b->copy_device(*reg, 0, *out, 0, 8).code() == ErrorCode::invalid_argument);
  DerivationLaunch into = l;
  into.src = *out;
  into.dst = *reg;
  const Status refused = b->launch(into);
  CHECK(refused.code() == ErrorCode::invalid_argument);
  CHECK(refused.error().message.find("dst") != std::string::npos);
  // Past the registered range, even inside the imported pages.
  std::vector<std::uint8_t> sink(2);
  CHECK(b->copy_to_host(std::as_writable_bytes(std::span(sink)), *reg, rows * cols - 1).code() == ErrorCode::out_of_bounds);

  CHECK(b->free(*reg).code() == ErrorCode::invalid_argument);  // not an allocation
  CHECK(b->unregister_host(*reg).ok());
  CHECK(b->unregister_host(*reg).code() == ErrorCode::invalid_argument);
  CHECK(b->counters().live_registrations == 0);

  // Register again, the whole file this time.
  auto again = b->register_host(file.data, file.size, HostAccess::read_only);
  REQUIRE(again.ok());
  CHECK(download<std::uint8_t>(*b, *again, file.size) == std::vector<std::uint8_t>(file.bytes(), file.bytes() + file.size));
  CHECK(b->unregister_host(*again).ok());
  CHECK(b->free(*out).ok());
}

TEST_CASE("read-write registrations of heap memory see host writes and take device writes") {
  auto b = open();
  std::vector<std::uint32_t> host(10000);
  if (!b->capabilities().host_registration) {
    // Skipped, with the reason; what can still be checked is that it refuses.
    MESSAGE("skipped: host registration unsupported here: " << b->capabilities().host_registration_note);
    CHECK(b->register_host(host.data(), host.size() * 4, HostAccess::read_write).code() == ErrorCode::unsupported);
    CHECK(b->counters().live_registrations == 0);
    return;
  }
  std::iota(host.begin(), host.end(), 0u);
  auto reg = b->register_host(host.data() + 3, 5000 * 4, HostAccess::read_write);
  REQUIRE(reg.ok());
  CHECK(download<std::uint32_t>(*b, *reg, 2) == std::vector<std::uint32_t>{3, 4});
  std::vector<std::uint32_t> values{111, 222};
  REQUIRE(b->copy_to_device(*reg, 8, std::as_bytes(std::span(values))).ok());
  CHECK(host[5] == 111);
  CHECK(host[6] == 222);
  CHECK(host[2] == 2);
  CHECK(b->unregister_host(*reg).ok());

  CHECK(b->register_host(host.data(), 0, HostAccess::read_only).code() == ErrorCode::invalid_argument);
  CHECK(b->register_host(nullptr, 16, HostAccess::read_only).code() == ErrorCode::invalid_argument);
}

}  // namespace ballast::vulkan::test
