#include "suballocator.hpp"

#include <algorithm>
#include <limits>
#include <new>

namespace ballast::vulkan {

SubAllocator::SubAllocator(const Device& device, MemoryObjects& objects, std::uint64_t block_bytes)
    : device_(device), objects_(objects), block_bytes_(std::max<std::uint64_t>(block_bytes & ~std::uint64_t{3}, 4)) {}

SubAllocator::~SubAllocator() {
  while (!blocks_.empty()) destroy_block(blocks_.back().get());
}

Result<Buffer> SubAllocator::create_block_buffer(std::uint64_t size) {
  auto b = detail::create_bound_buffer(device_, size, nullptr, nullptr, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
  if (!b && b.code() == ErrorCode::unsupported)  // no device-local type allowed: any type will do
    b = detail::create_bound_buffer(device_, size, nullptr, nullptr, ~0u, 0, 0);
  return b;
}

Result<Block*> SubAllocator::create_block(std::uint64_t size) {
  if (!objects_.has_room()) drop_cached_block();
  if (auto s = objects_.check_room("a memory block of " + std::to_string(size) + " bytes for allocations"); !s)
    return s.error();
  auto b = create_block_buffer(size);
  // The driver is out of memory: the cached empty block may be what is missing.
  if (!b && b.code() == ErrorCode::out_of_memory && drop_cached_block()) b = create_block_buffer(size);
  if (!b) return b.error();
  if (b->address % 4 != 0) {
    destroy_buffer(device_, *b);
    return make_error(ErrorCode::device_error, "the driver gave a buffer an address that is not a multiple of 4");
  }
  try {
    blocks_.push_back(std::make_unique<Block>(Block{*b, FreeRanges(size)}));
  } catch (const std::bad_alloc&) {
    destroy_buffer(device_, *b);
    return make_error(ErrorCode::out_of_memory, "no host memory to record a memory block");
  }
  objects_.add(MemoryObjects::Kind::block);
  return blocks_.back().get();
}

void SubAllocator::destroy_block(Block* block) {
  if (block == cached_) cached_ = nullptr;
  destroy_buffer(device_, block->buffer);
  objects_.remove(MemoryObjects::Kind::block);
  std::erase_if(blocks_, [block](const std::unique_ptr<Block>& b) { return b.get() == block; });
}

bool SubAllocator::drop_cached_block() {
  if (cached_ == nullptr) return false;
  destroy_block(cached_);
  return true;
}

Buffer SubAllocator::carve(Block& block, std::uint64_t offset, std::uint64_t size, std::uint64_t bytes) {
  Buffer out = block.buffer;  // the block's VkBuffer, its address and size: what copies bind
  out.kind = Buffer::Kind::allocation;
  out.user_ptr = block.buffer.address + offset;
  out.user_bytes = bytes;
  out.block = &block;
  out.block_offset = offset;
  out.block_bytes = size;
  ++block.allocations;
  return out;
}

Result<Buffer> SubAllocator::place_in_new(Block* block, std::uint64_t size, std::uint64_t alignment, std::uint64_t bytes) {
  if (auto offset = block->free.take(size, alignment, block->buffer.address)) return carve(*block, *offset, size, bytes);
  destroy_block(block);
  return make_error(ErrorCode::internal, "a memory block made for an allocation of " + std::to_string(bytes) +
                                             " bytes aligned to " + std::to_string(alignment) + " cannot hold it");
}

Result<Buffer> SubAllocator::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  const std::uint64_t max = device_.physical().max_allocation;
  if (bytes > max || bytes > std::numeric_limits<std::uint64_t>::max() - 3 || ((bytes + 3) & ~std::uint64_t{3}) > max)
    return make_error(ErrorCode::out_of_memory,
                      std::to_string(bytes) + " bytes exceed this device's largest single allocation (" +
                          std::to_string(max) + " bytes: min(maxMemoryAllocationSize, maxBufferSize))");
  // Whole words (kernels store 32-bit words, and no two allocations may
  // share one), never empty, so a zero-byte allocation still has a unique
  // address; word-aligned at least.
  const std::uint64_t size = bytes == 0 ? 4 : (bytes + 3) & ~std::uint64_t{3};
  const std::uint64_t align = std::max<std::uint64_t>(alignment, 4);

  // A block in use first (oldest first), then the cached empty one.
  for (const auto& owned : blocks_) {
    Block& block = *owned;
    if (&block == cached_ || block.free.largest_free() < size) continue;
    if (auto offset = block.free.take(size, align, block.buffer.address)) return carve(block, *offset, size, bytes);
  }
  if (cached_ != nullptr) {
    Block& block = *cached_;
    if (auto offset = block.free.take(size, align, block.buffer.address)) {
      cached_ = nullptr;
      return carve(block, *offset, size, bytes);
    }
  }

  // A new block. Aligning a start skips at most align - 4 bytes (block
  // addresses are multiples of 4), so `worst` bytes hold the request
  // wherever the driver puts the block.
  const bool fits = align - 4 <= max - size;
  const std::uint64_t worst = fits ? size + (align - 4) : 0;
  if (fits && worst <= block_bytes_) {
    auto block = create_block(block_bytes_);
    // No room on the device for a whole block: one just large enough.
    if (!block && block.code() == ErrorCode::out_of_memory && objects_.has_room() && worst < block_bytes_)
      block = create_block(worst);
    if (!block) return block.error();
    return place_in_new(*block, size, align, bytes);
  }
  // Larger than an ordinary block: a block of its own, exactly its size
  // unless the driver's address is less aligned than asked.
  auto block = create_block(size);
  if (!block) return block.error();
  if (auto offset = (*block)->free.take(size, align, (*block)->buffer.address))
    return carve(**block, *offset, size, bytes);
  destroy_block(*block);
  if (!fits)
    return make_error(ErrorCode::out_of_memory, std::to_string(bytes) + " bytes aligned to " + std::to_string(alignment) +
                                                    " exceed this device's largest single allocation (" +
                                                    std::to_string(max) + " bytes)");
  block = create_block(worst);
  if (!block) return block.error();
  return place_in_new(*block, size, align, bytes);
}

void SubAllocator::release(const Buffer& allocation) {
  Block* block = allocation.block;
  block->free.give_back(allocation.block_offset, allocation.block_bytes);
  if (--block->allocations != 0) return;
  if (cached_ == nullptr && block->buffer.size == block_bytes_) {
    cached_ = block;
    return;
  }
  destroy_block(block);
}

}  // namespace ballast::vulkan
