#include "host_import.hpp"

namespace ballast::vulkan {

Result<Buffer> import_host_range(const Device& device, const void* host, std::uint64_t bytes, bool read_only) {
  // The core has checked the range (non-null, non-empty, not wrapping) and
  // that this device imports at all (Capabilities::host_registration); only
  // what widening to the import alignment adds is checked here.
  const PhysicalDevice& physical = device.physical();
  const std::uint64_t align = physical.import_alignment;
  const auto start = reinterpret_cast<std::uintptr_t>(host);
  if (bytes > UINT64_MAX - start - align)
    return make_error(ErrorCode::overflow, "the host range widened to the import alignment wraps the address space");
  const std::uint64_t aligned_start = start & ~(align - 1);
  const std::uint64_t aligned_end = (start + bytes + align - 1) & ~(align - 1);
  const std::uint64_t size = aligned_end - aligned_start;
  if (size > physical.max_allocation)
    return make_error(ErrorCode::unsupported,
                      "registering " + std::to_string(bytes) + " bytes (" + std::to_string(size) +
                          " once widened to the import alignment) exceeds this device's largest single allocation (" +
                          std::to_string(physical.max_allocation) + " bytes); upload it in pieces instead");

  void* aligned_host = reinterpret_cast<void*>(aligned_start);
  VkMemoryHostPointerPropertiesEXT props{};
  props.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT;
  const VkResult r = device.fns().GetMemoryHostPointerPropertiesEXT(
      device.handle(), VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, aligned_host, &props);
  if (r != VK_SUCCESS) {
    auto e = vk_error(r, "vkGetMemoryHostPointerPropertiesEXT");
    e.code = ErrorCode::unsupported;
    e.message += ": the driver cannot import these host pages; upload instead";
    return e;
  }
  if (props.memoryTypeBits == 0)
    return make_error(ErrorCode::unsupported, "no Vulkan memory type can import these host pages "
                                              "(vkGetMemoryHostPointerPropertiesEXT returned none); upload instead");

  VkExternalMemoryBufferCreateInfo external{};
  external.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO;
  external.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  VkImportMemoryHostPointerInfoEXT import{};
  import.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT;
  import.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
  import.pHostPointer = aligned_host;

  auto b = detail::create_bound_buffer(device, size, &external, &import, props.memoryTypeBits, 0, 0, size);
  if (!b) {
    Error e = b.error();
    if (e.code == ErrorCode::device_error) e.code = ErrorCode::unsupported;
    // NVIDIA's driver pins imported pages for writing, so it refuses a
    // write-protected mapping (a model's data file mapped read-only) with
    // VK_ERROR_OUT_OF_DEVICE_MEMORY: that is the driver declining these
    // pages, not a device out of memory, and the caller should upload.
    if (read_only && e.code == ErrorCode::out_of_memory) {
      e.code = ErrorCode::unsupported;
      e.message += ": the driver refuses to import these read-only host pages; upload instead";
    }
    e.with_context("importing " + std::to_string(size) + " bytes of host memory");
    return e;
  }
  b->kind = Buffer::Kind::registration;
  b->read_only = read_only;
  b->user_ptr = b->address + (start - aligned_start);
  b->user_bytes = bytes;
  return b;
}

}  // namespace ballast::vulkan
