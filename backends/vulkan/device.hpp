// Vulkan instance, physical-device probing and the logical device.
#pragma once

#include "validation.hpp"
#include "vk_api.hpp"

#include <ballast/gpu_backend.hpp>

#include <memory>
#include <string>
#include <vector>

namespace ballast::vulkan {

// Every buffer ballast makes, allocated or imported: read and written by
// kernels through its device address, and by transfers.
inline constexpr VkBufferUsageFlags kBufferUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                                   VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT |
                                                   VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

// Owns a VkInstance (with the validation layer and its messenger when a log
// is given) and the instance-level function table.
class Instance {
 public:
  // `log` null: no validation. Otherwise the layer must be installed and
  // `log` must outlive the instance.
  static Result<std::unique_ptr<Instance>> create(ValidationLog* log);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  const InstanceFns& fns() const { return fns_; }

 private:
  Instance() = default;
  VkInstance instance_ = VK_NULL_HANDLE;
  InstanceFns fns_;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
};

// What ballast needs to know about one physical device.
struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  DeviceInfo info;
  VkPhysicalDeviceProperties properties{};
  VkPhysicalDeviceMemoryProperties memory{};
  std::uint64_t max_allocation = 0;  // min(maxMemoryAllocationSize, maxBufferSize)
  std::uint32_t compute_family = UINT32_MAX;
  bool host_import = false;  // VK_EXT_external_memory_host, usable for storage buffers
  std::string host_import_note;  // why not, when not
  std::uint64_t import_alignment = 0;  // minImportedHostPointerAlignment
  std::vector<std::string> missing;  // required features absent: the device cannot be opened
};

// Every physical device, in the driver's order (the index users select by).
Result<std::vector<PhysicalDevice>> enumerate_devices(const Instance& instance);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from a 16-byte UUID.
std::string format_uuid(const std::uint8_t (&uuid)[VK_UUID_SIZE]);

// The logical device with one compute queue.
class Device {
 public:
  static Result<std::unique_ptr<Device>> create(const Instance& instance, const PhysicalDevice& physical);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  VkDevice handle() const { return device_; }
  const DeviceFns& fns() const { return fns_; }
  VkQueue queue() const { return queue_; }
  std::uint32_t queue_family() const { return physical_.compute_family; }
  const PhysicalDevice& physical() const { return physical_; }

 private:
  explicit Device(PhysicalDevice physical) : physical_(std::move(physical)) {}
  PhysicalDevice physical_;
  VkDevice device_ = VK_NULL_HANDLE;
  DeviceFns fns_;
  VkQueue queue_ = VK_NULL_HANDLE;
};

}  // namespace ballast::vulkan
