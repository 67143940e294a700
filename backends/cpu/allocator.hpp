// Real, aligned host allocations, tracked so that unknown pointers and
// double frees are errors rather than heap corruption, and so that a
// launch can check that every operand lies inside a live allocation.
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

  // alignment: a power of two up to 1 GiB (0 means no requirement).
  Result<DevicePtr> allocate(std::uint64_t bytes, std::uint64_t alignment);
  Status free(DevicePtr ptr);

  // [ptr, ptr + bytes) inside one live allocation.
  bool contains(DevicePtr ptr, std::uint64_t bytes) const;
  // The live allocation whose range holds `ptr`, if any: for error messages.
  bool find(DevicePtr ptr, DevicePtr& base, std::uint64_t& bytes) const;

  std::uint64_t live_allocations() const;
  std::uint64_t live_bytes() const;

 private:
  struct Block {
    std::uint64_t bytes;      // as requested
    std::uint64_t alignment;  // as passed to operator new
  };
  std::uint64_t max_single_;
  mutable std::mutex mutex_;
  std::map<DevicePtr, Block> blocks_;
  std::uint64_t live_bytes_ = 0;
};

}  // namespace ballast::cpu
