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

}  // namespace

bool DeviceRanges::add(const DeviceRange& range) {
  auto next = ranges_.lower_bound(range.start);
  if (next != ranges_.end() && next->first < end_of(range)) return false;
  if (next != ranges_.begin() && end_of(std::prev(next)->second) > range.start) return false;
  ranges_.emplace(range.start, range);
  return true;
}

std::optional<DeviceRange> DeviceRanges::take(DevicePtr start, RangeKind kind) {
  auto it = ranges_.find(start);
  if (it == ranges_.end() || it->second.kind != kind) return std::nullopt;
  DeviceRange r = it->second;
  ranges_.erase(it);
  return r;
}

Result<DeviceRange> DeviceRanges::resolve(DevicePtr ptr, std::uint64_t bytes, Access access,
                                          std::string_view operand) const {
  const std::string what(operand);
  auto it = ranges_.upper_bound(ptr);
  if (it == ranges_.begin())
    return make_error(ErrorCode::invalid_argument, what + " " + hex(ptr) + " is not inside any allocation or registration of this backend");
  const DeviceRange& r = std::prev(it)->second;
  if (ptr >= end_of(r))
    return make_error(ErrorCode::invalid_argument, what + " " + hex(ptr) + " is not inside any allocation or registration of this backend");
  const std::uint64_t offset = ptr - r.start;
  if (bytes > r.bytes || offset > r.bytes - bytes) {
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
  for (const auto& [start, r] : ranges_) {
    if (r.kind == RangeKind::allocation) {
      ++c.live_allocations;
      c.live_bytes += r.bytes;
    } else {
      ++c.live_registrations;
    }
  }
  return c;
}

std::vector<DeviceRange> DeviceRanges::all() const {
  std::vector<DeviceRange> out;
  out.reserve(ranges_.size());
  for (const auto& [start, r] : ranges_) out.push_back(r);
  return out;
}

}  // namespace ballast::gpu
