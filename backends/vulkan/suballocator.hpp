// Device memory for allocations, carved out of large blocks.
//
// Drivers cap the number of live VkDeviceMemory objects
// (maxMemoryAllocationCount, 4096 on some), and paged residency with many
// small derived weights makes tens of thousands of allocations per model.
// So device-local memory is allocated in blocks of kBlockBytes, each one
// VkDeviceMemory with one VkBuffer spanning it (the usage flags of every
// ballast buffer, buffer device address included), and an allocation is a
// sub-range of a block: its pointer is the block buffer's address plus an
// offset, so kernels (which take raw device addresses) and copies (which
// bind the block's VkBuffer at that offset) need nothing else.
//
// A request too large for an ordinary block gets a block of its own, just
// its size. A block whose allocations are all freed is released at once,
// except that one empty ordinary block is kept: a loop that allocates and
// frees across a block boundary would otherwise create and destroy 64 MiB
// each time. The kept block is released first whenever another memory
// object (block or host import) would pass the limit, and before retrying
// a block the driver refused for lack of memory.
//
// Every new block is counted in MemoryObjects first, so the backend never
// holds more than its limit. Not thread-safe: the backend holds its mutex
// around every call.
#pragma once

#include "allocator.hpp"
#include "free_ranges.hpp"
#include "memory_objects.hpp"

#include <memory>
#include <vector>

namespace ballast::vulkan {

// An ordinary block: large enough that a model's many small allocations
// need few memory objects, small enough to be had on any device and to
// waste little when one stays cached empty.
inline constexpr std::uint64_t kBlockBytes = 64ull << 20;

struct Block {
  Buffer buffer;                 // the VkBuffer spanning the block's whole VkDeviceMemory
  FreeRanges free;               // its free bytes
  std::uint64_t allocations = 0; // live sub-allocations
};

class SubAllocator {
 public:
  // Ordinary blocks are `block_bytes` (at most the device's largest single
  // allocation). `device` and `objects` must outlive the sub-allocator.
  SubAllocator(const Device& device, MemoryObjects& objects, std::uint64_t block_bytes);
  ~SubAllocator();  // frees every block: nothing may still use them
  SubAllocator(const SubAllocator&) = delete;
  SubAllocator& operator=(const SubAllocator&) = delete;

  // An allocation of `bytes` (whole words reserved, at least one) whose
  // pointer (user_ptr) is aligned to `alignment`, a power of two: a
  // Buffer record of kind allocation (the allocation's cookie). out_of_memory
  // past the device's largest single allocation, past the memory-object
  // limit, or when the driver has no memory for a new block.
  Result<Buffer> allocate(std::uint64_t bytes, std::uint64_t alignment);
  // Returns an allocation's bytes to its block (no GPU work may still use
  // them); a block left empty is released or kept, as above.
  void release(const Buffer& allocation);
  // Releases the cached empty block, if there is one; true if it did.
  bool drop_cached_block();

  std::size_t block_count() const { return blocks_.size(); }
  std::uint64_t block_bytes() const { return block_bytes_; }

 private:
  Result<Block*> create_block(std::uint64_t size);
  Result<Buffer> create_block_buffer(std::uint64_t size);
  void destroy_block(Block* block);
  // The allocation placed in a block just created for it.
  Result<Buffer> place_in_new(Block* block, std::uint64_t size, std::uint64_t alignment, std::uint64_t bytes);
  Buffer carve(Block& block, std::uint64_t offset, std::uint64_t size, std::uint64_t bytes);

  const Device& device_;
  MemoryObjects& objects_;
  std::uint64_t block_bytes_;
  std::vector<std::unique_ptr<Block>> blocks_;  // oldest first: allocations fill old blocks, new ones can drain
  Block* cached_ = nullptr;                     // the empty ordinary block kept, if any
};

}  // namespace ballast::vulkan
