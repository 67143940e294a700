#include "allocator.hpp"

#include <sstream>

namespace ballast::vulkan {
namespace {

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// The end of the address range an entry holds: an allocation holds the
// whole words reserved for it, a registration what was registered.
DevicePtr end_of(const Buffer& b) {
  return b.user_ptr + (b.kind == Buffer::Kind::allocation ? b.block_bytes : b.user_bytes);
}

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

void BufferMap::insert(Buffer buffer) {
  if (buffer.kind == Buffer::Kind::allocation) {
    ++counters_.live_allocations;
    counters_.live_bytes += buffer.user_bytes;
  } else {
    ++counters_.live_registrations;
  }
  by_address_.emplace(buffer.user_ptr, buffer);
}

Result<Buffer> BufferMap::take(DevicePtr ptr, Buffer::Kind kind) {
  const char* what = kind == Buffer::Kind::allocation ? "allocation" : "registration";
  auto it = by_address_.upper_bound(ptr);
  if (it == by_address_.begin())
    return make_error(ErrorCode::invalid_argument, hex(ptr) + " is not a live " + std::string(what) + " (unknown pointer or already released)");
  --it;
  const Buffer& b = it->second;
  if (b.user_ptr != ptr || b.kind != kind) {
    if (ptr < end_of(b) && b.kind == kind)
      return make_error(ErrorCode::invalid_argument, hex(ptr) + " points inside the " + std::string(what) + " at " +
                                                         hex(b.user_ptr) + "; release that pointer instead");
    if (ptr == b.user_ptr)
      return make_error(ErrorCode::invalid_argument,
                        hex(ptr) + " is a " + std::string(kind == Buffer::Kind::allocation ? "host registration" : "device allocation") +
                            ", not a " + what);
    return make_error(ErrorCode::invalid_argument, hex(ptr) + " is not a live " + std::string(what) + " (unknown pointer or already released)");
  }
  Buffer out = b;
  by_address_.erase(it);
  if (kind == Buffer::Kind::allocation) {
    --counters_.live_allocations;
    counters_.live_bytes -= out.user_bytes;
  } else {
    --counters_.live_registrations;
  }
  return out;
}

Result<BufferRange> BufferMap::resolve(DevicePtr ptr, std::uint64_t bytes, std::string_view operand) const {
  auto it = by_address_.upper_bound(ptr);
  if (it != by_address_.begin()) {
    --it;
    const Buffer& b = it->second;
    if (ptr >= b.user_ptr && ptr - b.user_ptr <= b.user_bytes) {
      if (bytes > b.user_bytes - (ptr - b.user_ptr)) {
        auto e = make_error(ErrorCode::out_of_bounds,
                            std::string(operand) + ": " + std::to_string(bytes) + " bytes at " + hex(ptr) + " run past the end of the " +
                                (b.kind == Buffer::Kind::allocation ? "allocation" : "registration") + " at " +
                                hex(b.user_ptr) + " (" + std::to_string(b.user_bytes) + " bytes)");
        e.offset = ptr - b.user_ptr;
        return e;
      }
      return BufferRange{&b, ptr - b.address};
    }
  }
  return make_error(ErrorCode::invalid_argument,
                    std::string(operand) + ": " + hex(ptr) + " is not inside any live allocation or registration of this backend");
}

std::vector<Buffer> BufferMap::take_all() {
  std::vector<Buffer> out;
  for (auto& [address, b] : by_address_) out.push_back(b);
  by_address_.clear();
  counters_ = {};
  return out;
}

}  // namespace ballast::vulkan
