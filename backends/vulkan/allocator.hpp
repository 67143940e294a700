// Buffers addressed by their device addresses.
//
// An allocation is a sub-range of a memory block's VkBuffer
// (suballocator.hpp); a host registration is a VkBuffer bound to its own
// imported VkDeviceMemory. The ordered map from allocation and
// registration address ranges back to buffers lets free, the copies and
// kernel launches accept any pointer, including one inside an allocation,
// and check that a byte range stays inside it.
#pragma once

#include "device.hpp"

#include <ballast/gpu_backend.hpp>

#include <map>

namespace ballast::vulkan {

struct Block;

struct Buffer {
  enum class Kind : std::uint8_t { allocation, registration };
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  DevicePtr address = 0;          // the buffer's own device address
  std::uint64_t size = 0;         // of the VkBuffer
  DevicePtr user_ptr = 0;         // what allocate/register_host returned
  std::uint64_t user_bytes = 0;   // what the caller asked for
  Kind kind = Kind::allocation;
  bool read_only = false;
  // Allocations only: the block whose VkBuffer (above) they are carved
  // from, which owns the handles, and the bytes of it they hold (offset
  // from the block's start; whole words, at least one).
  Block* block = nullptr;
  std::uint64_t block_offset = 0;
  std::uint64_t block_bytes = 0;
};

// Destroys the buffer and frees its memory (no-op on null handles). Not
// for an allocation: its block owns the handles (SubAllocator::release).
void destroy_buffer(const Device& device, Buffer& buffer);

namespace detail {
// Creates a buffer of `size` and binds fresh memory of a type allowed by
// `type_filter` and the buffer's requirements, with `required` flags and
// preferably `preferred`; `memory_pnext` extends the allocation (a
// host-pointer import) and `memory_size`, when non-zero, fixes its size.
Result<Buffer> create_bound_buffer(const Device& device, std::uint64_t size, const void* buffer_pnext,
                                   const void* memory_pnext, std::uint32_t type_filter, VkMemoryPropertyFlags required,
                                   VkMemoryPropertyFlags preferred, std::uint64_t memory_size = 0);
}  // namespace detail

// A host-visible, coherent, persistently mapped buffer (for staging).
struct MappedBuffer {
  Buffer buffer;
  std::byte* mapped = nullptr;
};
Result<MappedBuffer> create_staging_buffer(const Device& device, std::uint64_t bytes);
void destroy_staging_buffer(const Device& device, MappedBuffer& staging);

// A resolved byte range: the buffer and the offset inside it.
struct BufferRange {
  const Buffer* buffer = nullptr;
  std::uint64_t offset = 0;  // from buffer->address: bind buffer->buffer at this offset
};


}  // namespace ballast::vulkan
