// Host registrations on the CPU backend are the identity: the host pointer
// is the device pointer, so kernels read the caller's memory (a read-only
// mmap, typically) in place. They are still tracked, so that unregistering
// something unknown is an error and writes into a read-only range are
// refused before they happen.
#pragma once

#include <ballast/derivation.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <map>
#include <mutex>

namespace ballast::cpu {

class Registrations {
 public:
  Result<DevicePtr> add(const void* host, std::uint64_t bytes, HostAccess access);
  // Removes the most recent registration starting at `ptr` (the same range
  // may be registered more than once).
  Status remove(DevicePtr ptr);

  // [ptr, ptr + bytes) inside one registration (of any access).
  bool readable(DevicePtr ptr, std::uint64_t bytes) const;
  // Inside one read-write registration.
  bool writable(DevicePtr ptr, std::uint64_t bytes) const;
  // Shares at least one byte with a read-only registration.
  bool overlaps_read_only(DevicePtr ptr, std::uint64_t bytes) const;

  std::uint64_t live() const;

 private:
  struct Range {
    std::uint64_t bytes;
    HostAccess access;
  };
  bool inside_one(DevicePtr ptr, std::uint64_t bytes, bool need_write) const;

  mutable std::mutex mutex_;
  std::multimap<DevicePtr, Range> ranges_;
};

}  // namespace ballast::cpu
