// The device address ranges one GpuBackend handed out (allocations and
// host registrations): the record every public call is checked against
// before a backend sees it, so an unknown or freed pointer, an operand
// past the end of its allocation, or a write into a read-only
// registration is an error value on every backend alike.
#pragma once

#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace ballast::detail {

enum class Access : std::uint8_t { read, write };

struct Allocation {
  std::uint64_t bytes = 0;
  std::uint64_t cookie = 0;  // the backend's, from do_allocate
};

struct Registration {
  std::uint64_t bytes = 0;
  HostAccess access = HostAccess::read_only;
  std::uint64_t cookie = 0;  // the backend's, from do_register_host
};

// Allocations never overlap (a zero-byte one still owns its address).
// Registrations may: two handles can cover the same addresses, even from
// the same start. Thread-safe; no method calls out while holding the lock.
class LiveRanges {
 public:
  // False when [start, +bytes) overlaps a live allocation (a backend bug).
  // May throw std::bad_alloc (the caller turns it into out_of_memory).
  bool add_allocation(DevicePtr start, const Allocation& a);
  // Removes the allocation starting exactly at `start`; its size, or
  // nothing when there is none. restore_allocation puts it back (no
  // allocation: the node is kept) when the backend's free failed.
  using AllocationNode = std::map<DevicePtr, Allocation>::node_type;
  AllocationNode take_allocation(DevicePtr start);
  void restore_allocation(AllocationNode node);

  void add_registration(DevicePtr start, const Registration& r);
  using RegistrationNode = std::multimap<DevicePtr, Registration>::node_type;
  // The most recent registration starting exactly at `start` (and, given
  // `made`, of its size and access: a registration's identity is all
  // three, since registrations may share a start).
  RegistrationNode take_registration(DevicePtr start, const Registration* made = nullptr);
  void restore_registration(RegistrationNode node);

  // [ptr, ptr + bytes) lies inside one live allocation, or one registration
  // (a read-write one for `write`), and a write touches no read-only
  // registration; the range's cookie and the offset of `ptr` in it (zero
  // bytes: nothing checked, nothing resolved). Errors name `operand`.
  Result<ResolvedOperand> resolve(std::string_view operand, DevicePtr ptr, std::uint64_t bytes, Access access) const;

  // Everything live, oldest registration last, removed from the record
  // (for GpuBackend::release_live_ranges).
  std::vector<std::pair<DevicePtr, Allocation>> take_all_allocations();
  std::vector<std::pair<DevicePtr, Registration>> take_all_registrations();

  AllocationCounters counters() const;

 private:
  bool overlaps_read_only(DevicePtr ptr, std::uint64_t bytes) const;
  const Registration* registration_holding(DevicePtr ptr, std::uint64_t bytes, bool need_write, DevicePtr& start) const;

  mutable std::mutex mutex_;
  std::map<DevicePtr, Allocation> allocations_;
  std::multimap<DevicePtr, Registration> registrations_;
  std::uint64_t allocated_bytes_ = 0;
};

// "[0x1000, +64 bytes)": how every validation error shows a range.
std::string format_range(DevicePtr ptr, std::uint64_t bytes);
// "<operand> [0x1000, +64 bytes)".
std::string describe_range(std::string_view operand, DevicePtr ptr, std::uint64_t bytes);

}  // namespace ballast::detail
