// The Vulkan entry points the backend uses, loaded at run time.
//
// volk finds and opens the system's Vulkan loader (so a machine without one
// gets `unavailable`, not a dlopen failure of this plugin). Instance and
// device functions live in per-object tables rather than volk's globals
// because several backends may be open at once, each with its own instance
// (one with the validation layer, one without) whose function pointers differ.
#pragma once

#include <ballast/status.hpp>

#include <volk.h>

#include <string>

namespace ballast::vulkan {

// Opens the Vulkan loader once per process; the reason when there is none.
Status load_vulkan_loader();

// Every entry point the backend uses, listed once: the tables below and
// their loaders (vk_api.cpp) are generated from these lists.
#define BALLAST_VK_INSTANCE_FNS(X) \
  X(DestroyInstance) \
  X(EnumeratePhysicalDevices) \
  X(GetPhysicalDeviceProperties) \
  X(GetPhysicalDeviceProperties2) \
  X(GetPhysicalDeviceFeatures2) \
  X(GetPhysicalDeviceMemoryProperties) \
  X(GetPhysicalDeviceQueueFamilyProperties) \
  X(EnumerateDeviceExtensionProperties) \
  X(GetPhysicalDeviceExternalBufferProperties) \
  X(CreateDevice) \
  X(GetDeviceProcAddr)
// Present only when VK_EXT_debug_utils was enabled on the instance.
#define BALLAST_VK_INSTANCE_OPTIONAL_FNS(X) \
  X(CreateDebugUtilsMessengerEXT) \
  X(DestroyDebugUtilsMessengerEXT)
#define BALLAST_VK_DEVICE_FNS(X) \
  X(DestroyDevice) \
  X(GetDeviceQueue) \
  X(DeviceWaitIdle) \
  X(CreateBuffer) \
  X(DestroyBuffer) \
  X(GetBufferMemoryRequirements) \
  X(AllocateMemory) \
  X(FreeMemory) \
  X(BindBufferMemory) \
  X(MapMemory) \
  X(UnmapMemory) \
  X(GetBufferDeviceAddress) \
  X(CreateCommandPool) \
  X(DestroyCommandPool) \
  X(AllocateCommandBuffers) \
  X(FreeCommandBuffers) \
  X(BeginCommandBuffer) \
  X(EndCommandBuffer) \
  X(ResetCommandBuffer) \
  X(CmdCopyBuffer) \
  X(CmdPipelineBarrier) \
  X(CmdBindPipeline) \
  X(CmdPushConstants) \
  X(CmdDispatch) \
  X(CreateFence) \
  X(DestroyFence) \
  X(WaitForFences) \
  X(ResetFences) \
  X(QueueSubmit) \
  X(CreateShaderModule) \
  X(DestroyShaderModule) \
  X(CreatePipelineLayout) \
  X(DestroyPipelineLayout) \
  X(CreateComputePipelines) \
  X(DestroyPipeline)
// Present only with VK_EXT_external_memory_host.
#define BALLAST_VK_DEVICE_HOST_IMPORT_FNS(X) X(GetMemoryHostPointerPropertiesEXT)

#define BALLAST_VK_MEMBER(name) PFN_vk##name name = nullptr;

struct InstanceFns {
  BALLAST_VK_INSTANCE_FNS(BALLAST_VK_MEMBER)
  BALLAST_VK_INSTANCE_OPTIONAL_FNS(BALLAST_VK_MEMBER)

  Status load(VkInstance instance);
};

struct DeviceFns {
  BALLAST_VK_DEVICE_FNS(BALLAST_VK_MEMBER)
  BALLAST_VK_DEVICE_HOST_IMPORT_FNS(BALLAST_VK_MEMBER)

  Status load(const InstanceFns& instance_fns, VkDevice device, bool host_import);
};

#undef BALLAST_VK_MEMBER

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.
const char* vk_result_name(VkResult r) noexcept;

// An error for a failed Vulkan call: the code follows the result (out of
// memory, device lost, ...), `native` holds the VkResult's name and the
// message says which operation failed.
Error vk_error(VkResult r, std::string operation);

// ok for VK_SUCCESS, else vk_error.
inline Status vk_check(VkResult r, const char* operation) {
  if (r == VK_SUCCESS) return {};
  return vk_error(r, operation);
}

}  // namespace ballast::vulkan
