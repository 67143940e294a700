#include "device.hpp"
#include "base/hex.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

namespace ballast::cpu {

namespace {

void* host(DevicePtr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }

bool overlap(DevicePtr a, std::uint64_t a_bytes, DevicePtr b, std::uint64_t b_bytes) {
  return a_bytes != 0 && b_bytes != 0 && a < b + b_bytes && b < a + a_bytes;
}

}  // namespace

CpuDevice::CpuDevice(DeviceInfo info, Capabilities caps, const DeviceOptions& options)
    : info_(std::move(info)),
      caps_(std::move(caps)),
      kernels_(options.simd && simd_kernels() ? simd_kernels() : &portable_kernels()),
      allocator_(caps_.max_single_allocation),
      pool_(options.threads) {}

Result<DevicePtr> CpuDevice::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  auto r = allocator_.allocate(bytes, alignment);
  if (!r) return std::move(r.error()).with_context("cpu: allocate " + std::to_string(bytes) + " bytes");
  return r;
}

Status CpuDevice::free(DevicePtr ptr) { return allocator_.free(ptr).with_context("cpu: free"); }

AllocationCounters CpuDevice::counters() const {
  return {allocator_.live_allocations(), allocator_.live_bytes(), registrations_.live()};
}

Status CpuDevice::check_range(const char* what, DevicePtr ptr, std::uint64_t offset, std::uint64_t bytes,
                              bool write) const {
  if (bytes == 0) return {};
  if (ptr == 0) return make_error(ErrorCode::invalid_argument, std::string(what) + " is a null device pointer");
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  if (offset > kMax - ptr || bytes > kMax - (ptr + offset))
    return make_error(ErrorCode::overflow, std::string(what) + ": " + hex(ptr) + " + offset " + std::to_string(offset) +
                                               " + " + std::to_string(bytes) + " bytes wraps the address space");
  const DevicePtr start = ptr + offset;
  const std::string range = std::string(what) + " [" + hex(start) + ", +" + std::to_string(bytes) + " bytes)";
  if (write && registrations_.overlaps_read_only(start, bytes))
    return make_error(ErrorCode::invalid_argument, range + " lies in a read-only host registration; it is never written");
  if (allocator_.contains(start, bytes)) return {};
  if (write ? registrations_.writable(start, bytes) : registrations_.readable(start, bytes)) return {};
  DevicePtr base;
  std::uint64_t size;
  if (allocator_.find(start, base, size))
    return make_error(ErrorCode::out_of_bounds, range + " runs past the end of its allocation [" + hex(base) + ", +" +
                                                    std::to_string(size) + " bytes)");
  if (registrations_.readable(start, 0))
    return make_error(ErrorCode::out_of_bounds, range + " runs past the end of its host registration");
  return make_error(ErrorCode::invalid_argument, range + " is not inside any live allocation or host registration");
}

Status CpuDevice::copy_to_device(DevicePtr dst, std::uint64_t dst_offset, std::span<const std::byte> src) {
  if (auto st = check_range("destination", dst, dst_offset, src.size(), true); !st)
    return std::move(st).with_context("cpu: copy_to_device");
  if (!src.empty()) std::memmove(static_cast<std::byte*>(host(dst)) + dst_offset, src.data(), src.size());
  return {};
}

Status CpuDevice::copy_to_host(std::span<std::byte> dst, DevicePtr src, std::uint64_t src_offset) {
  if (auto st = check_range("source", src, src_offset, dst.size(), false); !st)
    return std::move(st).with_context("cpu: copy_to_host");
  if (!dst.empty()) std::memmove(dst.data(), static_cast<const std::byte*>(host(src)) + src_offset, dst.size());
  return {};
}

Status CpuDevice::copy_device(DevicePtr dst, std::uint64_t dst_offset, DevicePtr src, std::uint64_t src_offset,
                              std::uint64_t bytes) {
  if (auto st = check_range("source", src, src_offset, bytes, false); !st) return std::move(st).with_context("cpu: copy_device");
  if (auto st = check_range("destination", dst, dst_offset, bytes, true); !st)
    return std::move(st).with_context("cpu: copy_device");
  if (bytes == 0) return {};
  auto* d = static_cast<std::byte*>(host(dst)) + dst_offset;
  const auto* s = static_cast<const std::byte*>(host(src)) + src_offset;
  if (overlap(dst + dst_offset, bytes, src + src_offset, bytes)) {
    std::memmove(d, s, bytes);
    return {};
  }
  // Large copies use every thread: one core alone cannot saturate memory.
  constexpr std::uint64_t kChunk = 1ull << 20;
  pool_.parallel_for((bytes + kChunk - 1) / kChunk, [&](std::uint64_t c0, std::uint64_t c1) {
    const std::uint64_t b0 = c0 * kChunk, b1 = std::min(bytes, c1 * kChunk);
    std::memcpy(d + b0, s + b0, b1 - b0);
  });
  return {};
}

Result<DevicePtr> CpuDevice::register_host(const void* host_ptr, std::uint64_t bytes, HostAccess access) {
  auto r = registrations_.add(host_ptr, bytes, access);
  if (!r) return std::move(r.error()).with_context("cpu: register_host");
  return r;
}

Status CpuDevice::unregister_host(DevicePtr ptr) { return registrations_.remove(ptr).with_context("cpu: unregister_host"); }

Status CpuDevice::launch(const DerivationLaunch& l) {
  const std::string doing = "cpu: launch " + std::string(derivation_name(l.kind));
  auto sizes = derivation_sizes(l);
  if (!sizes) return std::move(sizes.error()).with_context(doing);
  if (Status a = check_operand_alignment(l); !a.ok()) return std::move(a).with_context(doing);
  const DerivationSizes& s = *sizes;
  struct Operand {
    const char* name;
    DevicePtr ptr;
    std::uint64_t bytes;
    bool write;
  };
  const Operand operands[] = {
      {"src", l.src, s.src_bytes, false},         {"scales", l.scales, s.scales_bytes, false},
      {"zero_point", l.zero_point, s.zero_point_bytes, false}, {"dst", l.dst, s.dst_bytes, true},
      {"dst2", l.dst2, s.dst2_bytes, true},
  };
  for (const auto& o : operands)
    if (auto st = check_range(o.name, o.ptr, 0, o.bytes, o.write); !st) return std::move(st).with_context(doing);
  // A kernel reading what it is writing would produce garbage: refuse.
  for (const auto& out : operands) {
    if (!out.write) continue;
    for (const auto& other : operands) {
      if (&other == &out || (other.write && &other > &out)) continue;
      if (overlap(out.ptr, out.bytes, other.ptr, other.bytes))
        return Status(make_error(ErrorCode::invalid_argument,
                                 std::string(out.name) + " overlaps " + other.name + "; outputs must not alias any operand"))
            .with_context(doing);
    }
  }
  run_derivation(l, *kernels_, pool_);
  return {};
}

}  // namespace ballast::cpu
