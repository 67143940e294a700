#include "registrations.hpp"

#include <limits>
#include <string>

namespace ballast::cpu {

Result<DevicePtr> Registrations::add(const void* host, std::uint64_t bytes, HostAccess access) {
  if (host == nullptr) return make_error(ErrorCode::invalid_argument, "register_host of a null pointer");
  const auto ptr = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(host));
  if (bytes > std::numeric_limits<std::uint64_t>::max() - ptr)
    return make_error(ErrorCode::overflow, "register_host range of " + std::to_string(bytes) + " bytes wraps the address space");
  std::lock_guard<std::mutex> lock(mutex_);
  ranges_.emplace(ptr, Range{bytes, access});
  return ptr;
}

Status Registrations::remove(DevicePtr ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [first, last] = ranges_.equal_range(ptr);
  if (first == last)
    return make_error(ErrorCode::invalid_argument, "unregister_host of a pointer that is not a registered host range");
  ranges_.erase(std::prev(last));  // multimap keeps insertion order among equal keys
  return {};
}

bool Registrations::inside_one(DevicePtr ptr, std::uint64_t bytes, bool need_write) const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Ranges may overlap, so every range starting at or below ptr is a candidate.
  for (auto it = ranges_.upper_bound(ptr); it != ranges_.begin();) {
    --it;
    const Range& r = it->second;
    if (need_write && r.access != HostAccess::read_write) continue;
    if (bytes <= r.bytes && ptr - it->first <= r.bytes - bytes) return true;
  }
  return false;
}

bool Registrations::readable(DevicePtr ptr, std::uint64_t bytes) const { return inside_one(ptr, bytes, false); }

bool Registrations::writable(DevicePtr ptr, std::uint64_t bytes) const { return inside_one(ptr, bytes, true); }

bool Registrations::overlaps_read_only(DevicePtr ptr, std::uint64_t bytes) const {
  if (bytes == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = ranges_.lower_bound(ptr + bytes); it != ranges_.begin();) {
    --it;
    const Range& r = it->second;
    if (r.access == HostAccess::read_only && it->first + r.bytes > ptr) return true;
  }
  return false;
}

std::uint64_t Registrations::live() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ranges_.size();
}

}  // namespace ballast::cpu
