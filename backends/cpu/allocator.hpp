// Real, aligned host allocations. The core's record (GpuBackend) checks
// every pointer first and hands each allocation's cookie back to free():
// the cookie is the alignment the block was made with, which the matching
// operator delete needs, so this keeps no table of blocks. What the
// caller leaks the core frees before the device goes.
#pragma once

#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <cstdint>

namespace ballast::cpu {

class Allocator {
 public:
  explicit Allocator(std::uint64_t max_single_allocation);
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // alignment: a power of two (checked by the core) up to 1 GiB.
  Result<BackendRange> allocate(std::uint64_t bytes, std::uint64_t alignment);
  // `block` as allocate() returned it.
  void free(const BackendRange& block);

 private:
  std::uint64_t max_single_;
};

}  // namespace ballast::cpu
