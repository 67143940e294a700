#include "backend.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace ballast::cpu {

namespace {

void* host(DevicePtr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }

// Copies of at least two chunks go to every thread: one core alone cannot
// saturate memory (a warm page-in from a mapped file moves about half of
// what two threads do), and a 1 MiB chunk is long enough that handing it
// out costs nothing beside the copy. The chunks are handed out one at a
// time, not as one half per thread: a thread that wakes late then costs a
// chunk, not half the copy (warm paging on the Xeon of docs/benchmarks.md).
constexpr std::uint64_t kCopyChunk = 1ull << 20;

bool overlap(const std::byte* a, const std::byte* b, std::uint64_t bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

}  // namespace

void CpuDevice::copy(std::byte* d, const std::byte* s, std::uint64_t bytes) {
  if (bytes < 2 * kCopyChunk || overlap(d, s, bytes)) {
    std::memmove(d, s, bytes);  // a registered range may hold both
    return;
  }
  const bool stream = bytes >= kStreamBytes;
  const std::uint64_t chunks = (bytes + kCopyChunk - 1) / kCopyChunk;
  pool_.parallel_for(
      chunks,
      [&](std::uint64_t c0, std::uint64_t c1) {
        const std::uint64_t b0 = c0 * kCopyChunk, b1 = std::min(bytes, c1 * kCopyChunk);
        kernels_->copy(d + b0, s + b0, b1 - b0, stream);
      },
      chunks);
}

CpuDevice::CpuDevice(DeviceInfo info, Capabilities caps, const DeviceOptions& options)
    : info_(std::move(info)),
      caps_(std::move(caps)),
      kernels_(!options.simd                         ? &portable_kernels()
               : options.avx512 && simd512_kernels() ? simd512_kernels()
               : simd_kernels()                      ? simd_kernels()
                                                     : &portable_kernels()),
      allocator_(caps_.max_single_allocation, options.retain_bytes.value_or(0)),
      pool_(options.threads) {}

Result<BackendRange> CpuDevice::do_allocate(std::uint64_t bytes, std::uint64_t alignment) {
  return allocator_.allocate(bytes, alignment);
}

Status CpuDevice::do_free(const BackendRange& a, std::uint64_t) {
  allocator_.free(a);
  return {};
}

Status CpuDevice::do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) {
  copy(static_cast<std::byte*>(host(dst.ptr)), src.data(), src.size());
  return {};
}

Status CpuDevice::do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) {
  copy(dst.data(), static_cast<const std::byte*>(host(src.ptr)), dst.size());
  return {};
}

Status CpuDevice::do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) {
  // The core refuses overlapping device copies.
  copy(static_cast<std::byte*>(host(dst.ptr)), static_cast<const std::byte*>(host(src.ptr)), bytes);
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
