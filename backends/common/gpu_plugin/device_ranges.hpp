// The device address ranges a backend handed out (allocations and host
// registrations), so frees, transfers and launches can be checked before
// any driver sees them: an unknown or freed pointer, or an operand that
// runs past its allocation, is an error value instead of a device fault.
#pragma once

#include <ballast/derivation.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

namespace ballast::gpu {

enum class RangeKind : std::uint8_t { allocation, registration };

struct DeviceRange {
  DevicePtr start = 0;         // what the caller holds
  std::uint64_t bytes = 0;     // what the caller asked for
  RangeKind kind = RangeKind::allocation;
  bool read_only = false;
  DevicePtr driver_base = 0;   // what the driver returned (allocation: may precede start for alignment)
  const void* host = nullptr;  // registration: the widened host range the driver registered
};

enum class Access : std::uint8_t { read, write };

// Allocations never overlap. Registrations may: a sub-range of a mapping
// already registered is served from the same pinned pages, so two handles
// can cover the same addresses (even the same start, counted twice).
class DeviceRanges {
 public:
  // False when an allocation overlaps one already held (a driver bug).
  bool add(const DeviceRange& range);
  // Removes one range that starts exactly at `start` and has `kind`.
  std::optional<DeviceRange> take(DevicePtr start, RangeKind kind);
  // The range holding all of [ptr, ptr + bytes); errors name `operand`.
  Result<DeviceRange> resolve(DevicePtr ptr, std::uint64_t bytes, Access access, std::string_view operand) const;
  AllocationCounters counters() const;
  std::vector<DeviceRange> all() const;

 private:
  std::map<DevicePtr, DeviceRange> allocations_;
  std::multimap<DevicePtr, DeviceRange> registrations_;
};

}  // namespace ballast::gpu
