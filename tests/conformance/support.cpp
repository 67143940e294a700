#include "conformance/conformance.hpp"

#include <cstring>

namespace conformance {

LeakCheck::LeakCheck() : baseline_(gpu().counters()) {}

LeakCheck::~LeakCheck() {
  const auto now = gpu().counters();
  CHECK_MESSAGE(now.live_allocations == baseline_.live_allocations, "live allocations leaked");
  CHECK_MESSAGE(now.live_bytes == baseline_.live_bytes, "live bytes leaked");
  CHECK_MESSAGE(now.live_registrations == baseline_.live_registrations, "host registrations leaked");
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    owned_ = other.owned_;
    other.owned_ = false;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (!owned_) return;
  owned_ = false;
  const auto s = gpu().free(ptr_);
  CHECK_MESSAGE(s.ok(), "free: " << describe(s));
}

DeviceBuffer allocate(std::uint64_t bytes, std::uint64_t alignment) {
  auto p = gpu().allocate(bytes, alignment);
  REQUIRE_MESSAGE(p.ok(), "allocate(" << bytes << ", " << alignment << "): " << describe(p.status()));
  return DeviceBuffer(*p, bytes);
}

DeviceBuffer upload(std::span<const std::byte> host) {
  DeviceBuffer b = allocate(host.size());
  const auto s = gpu().copy_to_device(b.ptr(), 0, host);
  REQUIRE_MESSAGE(s.ok(), "copy_to_device of " << host.size() << " bytes: " << describe(s));
  return b;
}

std::vector<std::byte> download(DevicePtr ptr, std::uint64_t bytes, std::uint64_t offset) {
  std::vector<std::byte> out(bytes);
  const auto s = gpu().copy_to_host(out, ptr, offset);
  REQUIRE_MESSAGE(s.ok(), "copy_to_host of " << bytes << " bytes: " << describe(s));
  return out;
}

std::string describe(const ballast::Status& s) { return s.to_string(); }

}  // namespace conformance
