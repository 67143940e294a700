#include "device.hpp"

#include <algorithm>
#include <cstring>

namespace ballast::cpu {

namespace {

void* host(DevicePtr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }

}  // namespace

CpuDevice::CpuDevice(DeviceInfo info, Capabilities caps, const DeviceOptions& options)
    : info_(std::move(info)),
      caps_(std::move(caps)),
      kernels_(options.simd && simd_kernels() ? simd_kernels() : &portable_kernels()),
      allocator_(caps_.max_single_allocation),
      pool_(options.threads) {}

Result<DevicePtr> CpuDevice::do_allocate(std::uint64_t bytes, std::uint64_t alignment) {
  return allocator_.allocate(bytes, alignment);
}

Status CpuDevice::do_free(DevicePtr ptr, std::uint64_t) { return allocator_.free(ptr); }

Status CpuDevice::do_copy_to_device(DevicePtr dst, std::span<const std::byte> src) {
  std::memmove(host(dst), src.data(), src.size());  // a registered range may hold both
  return {};
}

Status CpuDevice::do_copy_to_host(std::span<std::byte> dst, DevicePtr src) {
  std::memmove(dst.data(), host(src), dst.size());
  return {};
}

Status CpuDevice::do_copy_device(DevicePtr dst, DevicePtr src, std::uint64_t bytes) {
  auto* d = static_cast<std::byte*>(host(dst));
  const auto* s = static_cast<const std::byte*>(host(src));
  // Large copies use every thread: one core alone cannot saturate memory.
  constexpr std::uint64_t kChunk = 1ull << 20;
  pool_.parallel_for((bytes + kChunk - 1) / kChunk, [&](std::uint64_t c0, std::uint64_t c1) {
    const std::uint64_t b0 = c0 * kChunk, b1 = std::min(bytes, c1 * kChunk);
    std::memcpy(d + b0, s + b0, b1 - b0);
  });
  return {};
}

Result<DevicePtr> CpuDevice::do_register_host(const void* host_ptr, std::uint64_t, HostAccess) {
  return static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(host_ptr));
}

Status CpuDevice::do_launch(const DerivationLaunch& l, const DerivationSizes&) {
  run_derivation(l, *kernels_, pool_);
  return {};
}

}  // namespace ballast::cpu
