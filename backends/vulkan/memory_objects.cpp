#include "memory_objects.hpp"

#include <algorithm>
#include <string>

namespace ballast::vulkan {

MemoryObjects::MemoryObjects(std::uint64_t driver_limit, std::uint64_t option_limit)
    : driver_limit_(driver_limit),
      option_limit_(option_limit),
      limit_(option_limit == 0 ? driver_limit : std::min(driver_limit, option_limit)) {}

Status MemoryObjects::check_room(std::string_view what) const {
  if (has_room()) return {};
  std::string source;
  if (option_limit_ != 0 && option_limit_ < driver_limit_)
    source = "max_memory_allocations=" + std::to_string(option_limit_) + "; the device allows " +
             std::to_string(driver_limit_);
  else
    source = "the device's maxMemoryAllocationCount";
  return make_error(ErrorCode::out_of_memory,
                    std::string(what) + " would be VkDeviceMemory object " + std::to_string(live() + 1) +
                        ", past this backend's limit of " + std::to_string(limit_) + " (" + source +
                        "); it holds " + std::to_string(live()) + " (blocks of allocations: " +
                        std::to_string(live(Kind::block)) + ", host registrations: " +
                        std::to_string(live(Kind::import)) + ", staging buffer: " +
                        std::to_string(live(Kind::staging)) + "); free allocations or registrations first");
}

void MemoryObjects::add(Kind kind) {
  ++live_[static_cast<std::size_t>(kind)];
  peak_ = std::max(peak_, live());
}

void MemoryObjects::remove(Kind kind) { --live_[static_cast<std::size_t>(kind)]; }

}  // namespace ballast::vulkan
