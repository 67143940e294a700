// The VkDeviceMemory objects a backend holds, counted against a limit.
//
// Drivers cap how many VkDeviceMemory objects may exist at once
// (VkPhysicalDeviceLimits::maxMemoryAllocationCount, 4096 on some), and
// past the cap vkAllocateMemory may fail in driver-specific ways or not at
// all until something else breaks. So the backend counts every object it
// creates (sub-allocator blocks, host imports, the staging buffer) and
// refuses, with a message naming the limit and the count, before asking
// the driver for one more. An engine sharing the device with others (or a
// test) sets a lower limit with the `max_memory_allocations` option.
// Not thread-safe: the backend holds its mutex around every call.
#pragma once

#include <ballast/gpu_backend.hpp>

#include <array>
#include <cstdint>
#include <string_view>

namespace ballast::vulkan {

class MemoryObjects {
 public:
  enum class Kind : std::uint8_t { block, import, staging };

  // `driver_limit` is maxMemoryAllocationCount; `option_limit` the
  // max_memory_allocations option (0: not given). The limit is the smaller.
  MemoryObjects(std::uint64_t driver_limit, std::uint64_t option_limit);

  // Ok when one more object fits; otherwise out_of_memory naming the
  // limit, where it comes from and what the live objects are. `what`
  // says what the object was for ("a 67108864-byte memory block").
  Status check_room(std::string_view what) const;
  bool has_room() const { return live() < limit_; }

  // Record an object created or destroyed.
  void add(Kind kind);
  void remove(Kind kind);

  std::uint64_t live() const { return live_[0] + live_[1] + live_[2]; }
  std::uint64_t live(Kind kind) const { return live_[static_cast<std::size_t>(kind)]; }
  // The most that were ever live at once (for tests).
  std::uint64_t peak() const { return peak_; }
  std::uint64_t limit() const { return limit_; }

 private:
  std::uint64_t driver_limit_;
  std::uint64_t option_limit_;
  std::uint64_t limit_;
  std::array<std::uint64_t, 3> live_{};
  std::uint64_t peak_ = 0;
};

}  // namespace ballast::vulkan
