#include "backend/live_ranges.hpp"

#include "base/hex.hpp"

#include <limits>
#include <string>

namespace ballast::detail {
namespace {

// A zero-byte allocation still owns one address, so it stays unique.
std::uint64_t footprint(std::uint64_t bytes) { return bytes == 0 ? 1 : bytes; }

bool inside(DevicePtr start, std::uint64_t size, DevicePtr ptr, std::uint64_t bytes) {
  return start <= ptr && ptr - start <= size && bytes <= size - (ptr - start);
}

}  // namespace

std::string format_range(DevicePtr ptr, std::uint64_t bytes) {
  return "[" + hex(ptr) + ", +" + std::to_string(bytes) + " bytes)";
}

std::string describe_range(std::string_view operand, DevicePtr ptr, std::uint64_t bytes) {
  return std::string(operand) + " " + format_range(ptr, bytes);
}

bool LiveRanges::add_allocation(DevicePtr start, const Allocation& a) {
  std::lock_guard lock(mutex_);
  const std::uint64_t size = footprint(a.bytes);
  auto next = allocations_.lower_bound(start);
  if (next != allocations_.end() && next->first - start < size) return false;
  if (next != allocations_.begin()) {
    auto prev = std::prev(next);
    if (start - prev->first < footprint(prev->second.bytes)) return false;
  }
  allocations_.emplace_hint(next, start, a);
  allocated_bytes_ += a.bytes;
  return true;
}

LiveRanges::AllocationNode LiveRanges::take_allocation(DevicePtr start) {
  std::lock_guard lock(mutex_);
  AllocationNode node = allocations_.extract(start);
  if (node) allocated_bytes_ -= node.mapped().bytes;
  return node;
}

void LiveRanges::restore_allocation(AllocationNode node) {
  std::lock_guard lock(mutex_);
  allocated_bytes_ += node.mapped().bytes;
  allocations_.insert(std::move(node));
}

void LiveRanges::add_registration(DevicePtr start, const Registration& r) {
  std::lock_guard lock(mutex_);
  registrations_.emplace(start, r);
}

LiveRanges::RegistrationNode LiveRanges::take_registration(DevicePtr start, const Registration* made) {
  std::lock_guard lock(mutex_);
  auto [first, last] = registrations_.equal_range(start);
  for (auto it = last; it != first;) {
    --it;
    if (made == nullptr || (it->second.bytes == made->bytes && it->second.access == made->access))
      return registrations_.extract(it);
  }
  return {};
}

void LiveRanges::restore_registration(RegistrationNode node) {
  std::lock_guard lock(mutex_);
  registrations_.insert(std::move(node));
}

bool LiveRanges::overlaps_read_only(DevicePtr ptr, std::uint64_t bytes) const {
  for (auto it = registrations_.begin(); it != registrations_.end() && it->first < ptr + bytes; ++it) {
    if (it->second.access == HostAccess::read_only && ptr < it->first + it->second.bytes) return true;
  }
  return false;
}

const Registration* LiveRanges::registration_holding(DevicePtr ptr, std::uint64_t bytes, bool need_write,
                                                     DevicePtr& start) const {
  for (auto it = registrations_.begin(); it != registrations_.end() && it->first <= ptr; ++it) {
    if (need_write && it->second.access == HostAccess::read_only) continue;
    if (inside(it->first, it->second.bytes, ptr, bytes)) {
      start = it->first;
      return &it->second;
    }
  }
  return nullptr;
}

Result<ResolvedOperand> LiveRanges::resolve(std::string_view operand, DevicePtr ptr, std::uint64_t bytes,
                                            Access access) const {
  if (bytes == 0) return ResolvedOperand{ptr, 0, 0};
  if (ptr == 0) return make_error(ErrorCode::invalid_argument, std::string(operand) + " is a null device pointer");
  if (bytes > std::numeric_limits<DevicePtr>::max() - ptr)
    return make_error(ErrorCode::overflow, describe_range(operand, ptr, bytes) + " wraps the address space");
  const bool write = access == Access::write;
  // Described only for an error: a check that passes allocates nothing, so
  // a copy or launch never fails (or throws) for want of host memory.
  const auto range = [&] { return describe_range(operand, ptr, bytes); };
  std::lock_guard lock(mutex_);
  if (write && overlaps_read_only(ptr, bytes))
    return make_error(ErrorCode::invalid_argument,
                      range() + " lies in a read-only host registration, which is never written");
  auto next = allocations_.upper_bound(ptr);
  const bool in_allocation = next != allocations_.begin() &&
                             ptr - std::prev(next)->first < footprint(std::prev(next)->second.bytes);
  if (in_allocation && inside(std::prev(next)->first, std::prev(next)->second.bytes, ptr, bytes))
    return ResolvedOperand{ptr, std::prev(next)->second.cookie, ptr - std::prev(next)->first};
  DevicePtr start = 0;
  if (const Registration* r = registration_holding(ptr, bytes, write, start)) return ResolvedOperand{ptr, r->cookie, ptr - start};
  if (in_allocation) {
    const auto& [base, a] = *std::prev(next);
    return make_error(ErrorCode::out_of_bounds,
                      range() + " runs past the end of its allocation " + format_range(base, a.bytes));
  }
  if (const Registration* r = registration_holding(ptr, 1, false, start))
    return make_error(ErrorCode::out_of_bounds,
                      range() + " runs past the end of its host registration " + format_range(start, r->bytes));
  return make_error(ErrorCode::invalid_argument, range() + " is not inside any live allocation or host registration");
}

std::vector<std::pair<DevicePtr, Allocation>> LiveRanges::take_all_allocations() {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<DevicePtr, Allocation>> out(allocations_.begin(), allocations_.end());
  allocations_.clear();
  allocated_bytes_ = 0;
  return out;
}

std::vector<std::pair<DevicePtr, Registration>> LiveRanges::take_all_registrations() {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<DevicePtr, Registration>> out(registrations_.begin(), registrations_.end());
  registrations_.clear();
  return out;
}

AllocationCounters LiveRanges::counters() const {
  std::lock_guard lock(mutex_);
  return {allocations_.size(), allocated_bytes_, registrations_.size()};
}

}  // namespace ballast::detail
