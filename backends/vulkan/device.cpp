#include "device.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace ballast::vulkan {
namespace {

// The instance version ballast asks for: 1.3 where the loader has it (for
// maintenance4's maxBufferSize), else 1.2, the minimum for buffer device
// addresses in core.
std::uint32_t requested_api_version() {
  const std::uint32_t loader = volkGetInstanceVersion();
  return loader >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
}

bool has_extension(const std::vector<VkExtensionProperties>& extensions, const char* name) {
  return std::any_of(extensions.begin(), extensions.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

std::string version_string(std::uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

// Drivers and layers are shared libraries that the loader opens for each
// instance and closes with the last one. One idle instance per layer set,
// kept for the life of the process (like the plugin itself), keeps them
// loaded: reopening a backend stays cheap, and LLVM-based drivers
// (lavapipe) do not drop global state that sanitizers would then report
// as leaked.
VkInstance g_driver_anchors[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};  // never destroyed, on purpose

void keep_driver_loaded(const VkInstanceCreateInfo& info, bool validation) {
  static std::once_flag once[2];
  const int slot = validation ? 1 : 0;
  std::call_once(once[slot], [&] {
    VkInstanceCreateInfo plain = info;
    plain.pNext = nullptr;
    plain.enabledExtensionCount = 0;
    plain.ppEnabledExtensionNames = nullptr;
    if (vkCreateInstance(&plain, nullptr, &g_driver_anchors[slot]) != VK_SUCCESS) g_driver_anchors[slot] = VK_NULL_HANDLE;
  });
}

}  // namespace

std::string format_uuid(const std::uint8_t (&uuid)[VK_UUID_SIZE]) {
  std::string out = "GPU-";
  char hex[3];
  for (unsigned i = 0; i < VK_UUID_SIZE; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    std::snprintf(hex, sizeof hex, "%02x", uuid[i]);
    out += hex;
  }
  return out;
}

Result<std::unique_ptr<Instance>> Instance::create(ValidationLog* log) {
  if (auto s = load_vulkan_loader(); !s) return s.error();
  if (volkGetInstanceVersion() < VK_API_VERSION_1_2)
    return make_error(ErrorCode::unavailable, "the Vulkan loader supports only version " +
                                                  version_string(volkGetInstanceVersion()) + "; ballast needs 1.2");
  if (log != nullptr && !validation_layer_installed())
    return make_error(ErrorCode::unavailable, std::string("validation=on needs ") + kValidationLayer +
                                                  ", which is not installed (Debian: vulkan-validationlayers)");

  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "ballast";
  app.pEngineName = "ballast";
  app.apiVersion = requested_api_version();

  const char* layers[] = {kValidationLayer};
  // Core validation only. Synchronization validation would add little (it
  // cannot see accesses through buffer device addresses, and every command
  // buffer starts with a full barrier) and its 1.3.239 implementation leaks
  // memory that LeakSanitizer reports in the sanitizer CI stage.
  const char* extensions[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  VkDebugUtilsMessengerCreateInfoEXT messenger_info{};

  VkInstanceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  info.pApplicationInfo = &app;
  if (log != nullptr) {
    messenger_info = log->messenger_info();
    info.pNext = &messenger_info;  // also reports problems inside vkCreateInstance itself
    info.enabledLayerCount = 1;
    info.ppEnabledLayerNames = layers;
    info.enabledExtensionCount = 1;
    info.ppEnabledExtensionNames = extensions;
  }

  std::unique_ptr<Instance> instance(new Instance());
  VkResult r = vkCreateInstance(&info, nullptr, &instance->instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    auto e = make_error(ErrorCode::unavailable, "no Vulkan driver (ICD) supports Vulkan 1.2 on this machine");
    e.native = vk_result_name(r);
    return e;
  }
  if (r != VK_SUCCESS) {
    instance->instance_ = VK_NULL_HANDLE;
    auto e = vk_error(r, "vkCreateInstance");
    if (e.code == ErrorCode::device_error) e.code = ErrorCode::unavailable;
    return e;
  }
  if (auto s = instance->fns_.load(instance->instance_); !s) return s.error();
  keep_driver_loaded(info, log != nullptr);
  if (log != nullptr) {
    if (instance->fns_.CreateDebugUtilsMessengerEXT == nullptr)
      return make_error(ErrorCode::unavailable, "the validation layer did not provide VK_EXT_debug_utils");
    if (auto s = vk_check(instance->fns_.CreateDebugUtilsMessengerEXT(instance->instance_, &messenger_info, nullptr,
                                                                      &instance->messenger_),
                          "vkCreateDebugUtilsMessengerEXT");
        !s)
      return s.error();
  }
  return instance;
}

Instance::~Instance() {
  if (instance_ == VK_NULL_HANDLE) return;
  if (messenger_ != VK_NULL_HANDLE) fns_.DestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  fns_.DestroyInstance(instance_, nullptr);
}

namespace {

PhysicalDevice probe(const Instance& instance, VkPhysicalDevice handle, int index) {
  const InstanceFns& f = instance.fns();
  PhysicalDevice d;
  d.handle = handle;
  f.GetPhysicalDeviceProperties(handle, &d.properties);
  f.GetPhysicalDeviceMemoryProperties(handle, &d.memory);

  std::uint32_t ext_count = 0;
  std::vector<VkExtensionProperties> extensions;
  if (f.EnumerateDeviceExtensionProperties(handle, nullptr, &ext_count, nullptr) == VK_SUCCESS) {
    extensions.resize(ext_count);
    if (f.EnumerateDeviceExtensionProperties(handle, nullptr, &ext_count, extensions.data()) != VK_SUCCESS)
      extensions.clear();
    extensions.resize(std::min<std::size_t>(ext_count, extensions.size()));
  }
  d.host_import = has_extension(extensions, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  const std::uint32_t api = std::min(d.properties.apiVersion, requested_api_version());

  VkPhysicalDeviceIDProperties id{};
  id.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
  VkPhysicalDeviceMaintenance3Properties m3{};
  m3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
  id.pNext = &m3;
  VkPhysicalDeviceMaintenance4Properties m4{};
  m4.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES;
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT host{};
  host.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT;
  void** tail = &m3.pNext;
  if (api >= VK_API_VERSION_1_3) {
    *tail = &m4;
    tail = &m4.pNext;
  }
  if (d.host_import) *tail = &host;
  VkPhysicalDeviceDriverProperties driver{};  // core in Vulkan 1.2, which ballast requires
  driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
  driver.pNext = &id;
  VkPhysicalDeviceProperties2 props2{};
  props2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props2.pNext = &driver;
  if (api >= VK_API_VERSION_1_2) f.GetPhysicalDeviceProperties2(handle, &props2);

  d.info.backend = "vulkan";
  d.info.index = index;
  d.info.name = d.properties.deviceName;
  d.info.uuid = format_uuid(id.deviceUUID);
  d.info.driver = std::string(driver.driverName) + ": " + driver.driverInfo;
  for (std::uint32_t h = 0; h < d.memory.memoryHeapCount; ++h)
    if (d.memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) d.info.memory_bytes += d.memory.memoryHeaps[h].size;
  d.max_allocation = m3.maxMemoryAllocationSize;
  if (api >= VK_API_VERSION_1_3 && m4.maxBufferSize != 0) d.max_allocation = std::min<std::uint64_t>(d.max_allocation, m4.maxBufferSize);
  d.import_alignment = d.host_import ? host.minImportedHostPointerAlignment : 0;
  if (!d.host_import) {
    d.host_import_note = "the Vulkan driver lacks VK_EXT_external_memory_host; weights are uploaded instead";
  } else if (d.import_alignment == 0 || (d.import_alignment & (d.import_alignment - 1)) != 0) {
    d.host_import = false;
    d.host_import_note = "the driver reports an invalid minImportedHostPointerAlignment (" +
                         std::to_string(d.import_alignment) + "); weights are uploaded instead";
  } else {
    VkPhysicalDeviceExternalBufferInfo query{};
    query.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO;
    query.usage = kBufferUsage;
    query.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    VkExternalBufferProperties answer{};
    answer.sType = VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES;
    f.GetPhysicalDeviceExternalBufferProperties(handle, &query, &answer);
    if (!(answer.externalMemoryProperties.externalMemoryFeatures & VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT)) {
      d.host_import = false;
      d.host_import_note = "the driver cannot import host memory for storage buffers with device addresses; "
                           "weights are uploaded instead";
    }
  }

  if (api < VK_API_VERSION_1_2) {
    d.missing.push_back("Vulkan 1.2 (device reports " + version_string(d.properties.apiVersion) + ")");
    return d;
  }
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f12;
  f.GetPhysicalDeviceFeatures2(handle, &features);
  if (!f12.bufferDeviceAddress) d.missing.push_back("bufferDeviceAddress");

  std::uint32_t family_count = 0;
  f.GetPhysicalDeviceQueueFamilyProperties(handle, &family_count, nullptr);
  std::vector<VkQueueFamilyProperties> families(family_count);
  f.GetPhysicalDeviceQueueFamilyProperties(handle, &family_count, families.data());
  for (std::uint32_t i = 0; i < family_count; ++i) {
    if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && families[i].queueCount > 0) {
      d.compute_family = i;
      break;
    }
  }
  if (d.compute_family == UINT32_MAX) d.missing.push_back("a compute queue");
  return d;
}

}  // namespace

Result<std::vector<PhysicalDevice>> enumerate_devices(const Instance& instance) {
  std::uint32_t count = 0;
  if (auto s = vk_check(instance.fns().EnumeratePhysicalDevices(instance.handle(), &count, nullptr),
                        "vkEnumeratePhysicalDevices");
      !s)
    return s.error();
  std::vector<VkPhysicalDevice> handles(count);
  VkResult r = instance.fns().EnumeratePhysicalDevices(instance.handle(), &count, handles.data());
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return vk_error(r, "vkEnumeratePhysicalDevices");
  handles.resize(std::min<std::size_t>(count, handles.size()));
  if (handles.empty()) return make_error(ErrorCode::unavailable, "no Vulkan physical device");
  std::vector<PhysicalDevice> out;
  for (std::size_t i = 0; i < handles.size(); ++i) out.push_back(probe(instance, handles[i], static_cast<int>(i)));
  return out;
}

Result<std::unique_ptr<Device>> Device::create(const Instance& instance, const PhysicalDevice& physical) {
  if (!physical.missing.empty()) {
    std::string list;
    for (const auto& m : physical.missing) list += (list.empty() ? "" : ", ") + m;
    return make_error(ErrorCode::unavailable, "Vulkan device " + std::to_string(physical.info.index) + " (" +
                                                  physical.info.name + ") lacks required " + list);
  }
  std::unique_ptr<Device> device(new Device(physical));

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{};
  queue.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  queue.queueFamilyIndex = physical.compute_family;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;

  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  f12.bufferDeviceAddress = VK_TRUE;
  const char* extensions[] = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};

  VkDeviceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  info.pNext = &f12;
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue;
  info.enabledExtensionCount = physical.host_import ? 1 : 0;
  info.ppEnabledExtensionNames = extensions;
  if (auto s = vk_check(instance.fns().CreateDevice(physical.handle, &info, nullptr, &device->device_), "vkCreateDevice"); !s) {
    device->device_ = VK_NULL_HANDLE;
    return std::move(s).with_context("opening Vulkan device " + std::to_string(physical.info.index));
  }
  if (auto s = device->fns_.load(instance.fns(), device->device_, physical.host_import); !s) return s.error();
  device->fns_.GetDeviceQueue(device->device_, physical.compute_family, 0, &device->queue_);
  return device;
}

Device::~Device() {
  if (device_ == VK_NULL_HANDLE) return;
  if (fns_.DeviceWaitIdle != nullptr) fns_.DeviceWaitIdle(device_);
  if (fns_.DestroyDevice != nullptr) fns_.DestroyDevice(device_, nullptr);
}

}  // namespace ballast::vulkan
