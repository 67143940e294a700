#include "vk_api.hpp"

#include <mutex>

namespace ballast::vulkan {

Status load_vulkan_loader() {
  static std::once_flag once;
  static VkResult result = VK_ERROR_INITIALIZATION_FAILED;
  std::call_once(once, [] { result = volkInitialize(); });
  if (result != VK_SUCCESS)
    return make_error(ErrorCode::unavailable, "no Vulkan loader: libvulkan.so.1 could not be opened (install libvulkan1 and a driver)");
  return {};
}

namespace {

template <class Fn>
bool load_instance_fn(VkInstance instance, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(vkGetInstanceProcAddr(instance, name));
  return out != nullptr;
}

template <class Fn>
bool load_device_fn(PFN_vkGetDeviceProcAddr gdpa, VkDevice device, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(gdpa(device, name));
  return out != nullptr;
}

Error missing_entry_point(const char* name) {
  auto e = make_error(ErrorCode::unavailable, std::string("the Vulkan driver does not provide ") + name);
  e.native = name;
  return e;
}

}  // namespace

#define BALLAST_VK_REQUIRED_INSTANCE_FN(member) \
  if (!load_instance_fn(instance, "vk" #member, member)) return missing_entry_point("vk" #member);
#define BALLAST_VK_OPTIONAL_INSTANCE_FN(member) load_instance_fn(instance, "vk" #member, member);

Status InstanceFns::load(VkInstance instance) {
  BALLAST_VK_INSTANCE_FNS(BALLAST_VK_REQUIRED_INSTANCE_FN)
  BALLAST_VK_INSTANCE_OPTIONAL_FNS(BALLAST_VK_OPTIONAL_INSTANCE_FN)
  return {};
}

#define BALLAST_VK_REQUIRED_DEVICE_FN(member) \
  if (!load_device_fn(gdpa, device, "vk" #member, member)) return missing_entry_point("vk" #member);

Status DeviceFns::load(const InstanceFns& instance_fns, VkDevice device, bool host_import) {
  const PFN_vkGetDeviceProcAddr gdpa = instance_fns.GetDeviceProcAddr;
  BALLAST_VK_DEVICE_FNS(BALLAST_VK_REQUIRED_DEVICE_FN)
  if (host_import) {
    BALLAST_VK_DEVICE_HOST_IMPORT_FNS(BALLAST_VK_REQUIRED_DEVICE_FN)
  }
  return {};
}

const char* vk_result_name(VkResult r) noexcept {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_EVENT_SET: return "VK_EVENT_SET";
    case VK_EVENT_RESET: return "VK_EVENT_RESET";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_UNKNOWN: return "VK_ERROR_UNKNOWN";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_EXTERNAL_HANDLE: return "VK_ERROR_INVALID_EXTERNAL_HANDLE";
    case VK_ERROR_FRAGMENTATION: return "VK_ERROR_FRAGMENTATION";
    case VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS: return "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS";
    case VK_PIPELINE_COMPILE_REQUIRED: return "VK_PIPELINE_COMPILE_REQUIRED";
    case VK_ERROR_VALIDATION_FAILED_EXT: return "VK_ERROR_VALIDATION_FAILED_EXT";
    case VK_ERROR_NOT_PERMITTED_KHR: return "VK_ERROR_NOT_PERMITTED_KHR";
    default: return "VK_RESULT_UNKNOWN";
  }
}

Error vk_error(VkResult r, std::string operation) {
  ErrorCode code = ErrorCode::device_error;
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_TOO_MANY_OBJECTS:
    case VK_ERROR_FRAGMENTATION:
      code = ErrorCode::out_of_memory;
      break;
    case VK_ERROR_INCOMPATIBLE_DRIVER:
    case VK_ERROR_INITIALIZATION_FAILED:
      code = ErrorCode::unavailable;
      break;
    default: break;
  }
  std::string name = vk_result_name(r);
  if (name == "VK_RESULT_UNKNOWN") name = "VkResult(" + std::to_string(static_cast<int>(r)) + ")";
  auto e = make_error(code, std::move(operation) + " failed with " + name);
  e.native = std::move(name);
  return e;
}

}  // namespace ballast::vulkan
