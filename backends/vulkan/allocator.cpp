#include "allocator.hpp"

namespace ballast::vulkan {
namespace {

// A memory type allowed by `type_bits` with all of `required`, preferring
// one that also has `preferred`.
std::optional<std::uint32_t> pick_memory_type(const VkPhysicalDeviceMemoryProperties& memory, std::uint32_t type_bits,
                                              VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred) {
  std::optional<std::uint32_t> fallback;
  for (std::uint32_t i = 0; i < memory.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags flags = memory.memoryTypes[i].propertyFlags;
    if ((flags & required) != required) continue;
    if ((flags & preferred) == preferred) return i;
    if (!fallback) fallback = i;
  }
  return fallback;
}

}  // namespace

namespace detail {

Result<Buffer> create_bound_buffer(const Device& device, std::uint64_t size, const void* buffer_pnext,
                                   const void* memory_pnext, std::uint32_t type_filter, VkMemoryPropertyFlags required,
                                   VkMemoryPropertyFlags preferred, std::uint64_t memory_size) {
  const DeviceFns& f = device.fns();
  Buffer b;
  b.size = size;
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.pNext = buffer_pnext;
  info.size = size;
  info.usage = kBufferUsage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (auto s = vk_check(f.CreateBuffer(device.handle(), &info, nullptr, &b.buffer), "vkCreateBuffer"); !s) return s.error();

  VkMemoryRequirements req{};
  f.GetBufferMemoryRequirements(device.handle(), b.buffer, &req);
  if (memory_size != 0 && req.size > memory_size) {
    destroy_buffer(device, b);
    return make_error(ErrorCode::unsupported, "the driver needs " + std::to_string(req.size) +
                                                  " bytes of memory behind a buffer of " + std::to_string(size) +
                                                  ", more than the imported range");
  }
  const auto type = pick_memory_type(device.physical().memory, req.memoryTypeBits & type_filter, required, preferred);
  if (!type) {
    destroy_buffer(device, b);
    return make_error(ErrorCode::unsupported, "no Vulkan memory type suits a storage buffer here");
  }
  VkMemoryAllocateFlagsInfo flags{};
  flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
  flags.pNext = memory_pnext;
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  alloc.pNext = &flags;
  alloc.allocationSize = memory_size != 0 ? memory_size : req.size;
  alloc.memoryTypeIndex = *type;
  if (auto s = vk_check(f.AllocateMemory(device.handle(), &alloc, nullptr, &b.memory), "vkAllocateMemory"); !s) {
    destroy_buffer(device, b);
    return std::move(s).with_context("allocating " + std::to_string(alloc.allocationSize) + " bytes");
  }
  if (auto s = vk_check(f.BindBufferMemory(device.handle(), b.buffer, b.memory, 0), "vkBindBufferMemory"); !s) {
    destroy_buffer(device, b);
    return s.error();
  }
  VkBufferDeviceAddressInfo address{};
  address.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
  address.buffer = b.buffer;
  b.address = f.GetBufferDeviceAddress(device.handle(), &address);
  if (b.address == 0) {
    destroy_buffer(device, b);
    return make_error(ErrorCode::device_error, "vkGetBufferDeviceAddress returned 0");
  }
  return b;
}

}  // namespace detail

using detail::create_bound_buffer;

void destroy_buffer(const Device& device, Buffer& buffer) {
  if (buffer.buffer != VK_NULL_HANDLE) device.fns().DestroyBuffer(device.handle(), buffer.buffer, nullptr);
  if (buffer.memory != VK_NULL_HANDLE) device.fns().FreeMemory(device.handle(), buffer.memory, nullptr);
  buffer.buffer = VK_NULL_HANDLE;
  buffer.memory = VK_NULL_HANDLE;
}

Result<MappedBuffer> create_staging_buffer(const Device& device, std::uint64_t bytes) {
  MappedBuffer staging;
  const VkMemoryPropertyFlags visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  // Cached memory makes device-to-host reads fast on discrete GPUs.
  auto b = create_bound_buffer(device, bytes, nullptr, nullptr, ~0u, visible, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  if (!b) return std::move(b.error()).with_context("creating the staging buffer");
  staging.buffer = *b;
  void* mapped = nullptr;
  if (auto s = vk_check(device.fns().MapMemory(device.handle(), staging.buffer.memory, 0, VK_WHOLE_SIZE, 0, &mapped),
                        "vkMapMemory");
      !s) {
    destroy_buffer(device, staging.buffer);
    return std::move(s).with_context("mapping the staging buffer");
  }
  staging.mapped = static_cast<std::byte*>(mapped);
  return staging;
}

void destroy_staging_buffer(const Device& device, MappedBuffer& staging) {
  if (staging.mapped != nullptr) device.fns().UnmapMemory(device.handle(), staging.buffer.memory);
  staging.mapped = nullptr;
  destroy_buffer(device, staging.buffer);
}

}  // namespace ballast::vulkan
