// Real, aligned host allocations. The core's record (GpuBackend) checks
// every pointer first; this one remembers each block's alignment, which
// the matching operator delete needs, and frees what the caller leaked.
#pragma once

#include <ballast/derivation.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <map>
#include <mutex>

namespace ballast::cpu {

class Allocator {
 public:
  explicit Allocator(std::uint64_t max_single_allocation);
  ~Allocator();  // releases whatever the caller leaked
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // alignment: a power of two (checked by the core) up to 1 GiB.
  Result<DevicePtr> allocate(std::uint64_t bytes, std::uint64_t alignment);
  Status free(DevicePtr ptr);

 private:
  struct Block {
    std::uint64_t bytes;      // as requested
    std::uint64_t alignment;  // as passed to operator new
  };
  std::uint64_t max_single_;
  mutable std::mutex mutex_;
  std::map<DevicePtr, Block> blocks_;
};

}  // namespace ballast::cpu
