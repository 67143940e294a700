// Zero-copy host registration through VK_EXT_external_memory_host.
//
// The host range is widened to minImportedHostPointerAlignment on both
// ends, imported as VkDeviceMemory, and bound to a buffer with a device
// address; the pointer handed back is that address plus the distance from
// the widened start to the requested byte. Nothing is ever copied: where
// the driver cannot import (extension missing, no memory type for these
// pages, e.g. file-backed pages on many discrete GPUs) the result is
// `unsupported` and callers upload instead.
#pragma once

#include "allocator.hpp"

namespace ballast::vulkan {

Result<Buffer> import_host_range(const Device& device, const void* host, std::uint64_t bytes, bool read_only);

}  // namespace ballast::vulkan
