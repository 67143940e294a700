#include "backend.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>

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

Result<BackendRange> CpuDevice::do_allocate(std::uint64_t bytes, std::uint64_t alignment) {
  return allocator_.allocate(bytes, alignment);
}

Status CpuDevice::do_free(const BackendRange& a, std::uint64_t) {
  allocator_.free(a);
  return {};
}

Status CpuDevice::do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) {
  std::memmove(host(dst.ptr), src.data(), src.size());  // a registered range may hold both
  return {};
}

Status CpuDevice::do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) {
  std::memmove(dst.data(), host(src.ptr), dst.size());
  return {};
}

Status CpuDevice::do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) {
  auto* d = static_cast<std::byte*>(host(dst.ptr));
  const auto* s = static_cast<const std::byte*>(host(src.ptr));
  // Large copies use every thread: one core alone cannot saturate memory.
  constexpr std::uint64_t kChunk = 1ull << 20;
  pool_.parallel_for((bytes + kChunk - 1) / kChunk, [&](std::uint64_t c0, std::uint64_t c1) {
    const std::uint64_t b0 = c0 * kChunk, b1 = std::min(bytes, c1 * kChunk);
    std::memcpy(d + b0, s + b0, b1 - b0);
  });
  return {};
}

Result<BackendRange> CpuDevice::do_register_host(const void* host_ptr, std::uint64_t, HostAccess) {
  return BackendRange{static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(host_ptr)), 0};
}

Status CpuDevice::do_launch(const DerivationLaunch& l, const DerivationSizes&, const LaunchOperands&) {
  run_derivation(l, *kernels_, pool_);
  return {};
}

void* CpuDevice::do_extension(const char* name) {
  if (std::string_view(name) == kKernelSetExtension) return const_cast<char*>(kernels_->name);
  return nullptr;
}

}  // namespace ballast::cpu
