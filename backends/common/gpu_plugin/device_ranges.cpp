#include "gpu_plugin/device_ranges.hpp"

#include <string>

namespace ballast::gpu {
namespace {

std::string hex(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  do {
    s.insert(s.begin(), kDigits[v & 0xf]);
    v >>= 4;
  } while (v != 0);
  return "0x" + s;
}

// End of a range as an exclusive bound; zero-byte ranges still own their start.
std::uint64_t end_of(const DeviceRange& r) { return r.start + (r.bytes == 0 ? 1 : r.bytes); }

bool holds(const DeviceRange& r, DevicePtr ptr) { return ptr >= r.start && ptr < end_of(r); }

bool holds_all(const DeviceRange& r, DevicePtr ptr, std::uint64_t bytes) {
  const std::uint64_t offset = ptr - r.start;
  return holds(r, ptr) && bytes <= r.bytes && offset <= r.bytes - bytes;
}

}  // namespace

bool DeviceRanges::add(const DeviceRange& range) {
  if (range.kind == RangeKind::registration) {
    registrations_.emplace(range.start, range);
    return true;
  }
  auto next = allocations_.lower_bound(range.start);
  if (next != allocations_.end() && next->first < end_of(range)) return false;
  if (next != allocations_.begin() && end_of(std::prev(next)->second) > range.start) return false;
  allocations_.emplace(range.start, range);
  return true;
}

std::optional<DeviceRange> DeviceRanges::take(DevicePtr start, RangeKind kind) {
  if (kind == RangeKind::allocation) {
    auto it = allocations_.find(start);
    if (it == allocations_.end()) return std::nullopt;
    DeviceRange r = it->second;
    allocations_.erase(it);
    return r;
  }
  auto it = registrations_.find(start);
  if (it == registrations_.end()) return std::nullopt;
  DeviceRange r = it->second;
  registrations_.erase(it);
  return r;
}

Result<DeviceRange> DeviceRanges::resolve(DevicePtr ptr, std::uint64_t bytes, Access access,
                                          std::string_view operand) const {
  const std::string what(operand);
  // The candidate that holds ptr: the allocation, or the registrations
  // (several may overlap; prefer one that holds all bytes and allows the access).
  const DeviceRange* found = nullptr;
  if (auto it = allocations_.upper_bound(ptr); it != allocations_.begin() && holds(std::prev(it)->second, ptr)) {
    found = &std::prev(it)->second;
  } else {
    int best = -1;
    for (const auto& [start, r] : registrations_) {
      if (start > ptr) break;
      if (!holds(r, ptr)) continue;
      const int score = (holds_all(r, ptr, bytes) ? 2 : 0) + (access == Access::read || !r.read_only ? 1 : 0);
      if (score > best) {
        best = score;
        found = &r;
      }
    }
  }
  if (found == nullptr)
    return make_error(ErrorCode::invalid_argument,
                      what + " " + hex(ptr) + " is not inside any allocation or registration of this backend");
  const DeviceRange& r = *found;
  if (!holds_all(r, ptr, bytes)) {
    const std::uint64_t offset = ptr - r.start;
    Error e = make_error(ErrorCode::out_of_bounds, what + " needs " + std::to_string(bytes) + " bytes at offset " +
                                                       std::to_string(offset) + " of a " + std::to_string(r.bytes) +
                                                       "-byte " + (r.kind == RangeKind::allocation ? "allocation" : "registration"));
    e.offset = offset;
    return e;
  }
  if (access == Access::write && r.read_only)
    return make_error(ErrorCode::invalid_argument, what + " is inside a read-only host registration and would be written");
  return r;
}

AllocationCounters DeviceRanges::counters() const {
  AllocationCounters c;
  for (const auto& [start, r] : allocations_) {
    ++c.live_allocations;
    c.live_bytes += r.bytes;
  }
  c.live_registrations = registrations_.size();
  return c;
}

std::vector<DeviceRange> DeviceRanges::all() const {
  std::vector<DeviceRange> out;
  out.reserve(allocations_.size() + registrations_.size());
  for (const auto& [start, r] : allocations_) out.push_back(r);
  for (const auto& [start, r] : registrations_) out.push_back(r);
  return out;
}

}  // namespace ballast::gpu
