#include "cuda_hip/host/plugin.hpp"

#include "cuda_hip/host/backend.hpp"

#include <string>

namespace ballast::gpu {

Result<std::vector<DeviceInfo>> RuntimePlugin::devices() {
  int count = 0;
  if (NativeCode c = api_.device_count(&count); c != kNativeSuccess) {
    Error e = make_error(ErrorCode::unavailable, api_.unavailable_reason(c));
    e.native = api_.error_name(c);
    return e;
  }
  if (count <= 0) return make_error(ErrorCode::unavailable, std::string("no ") + api_.backend + " device");
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    NativeDevice dev;
    if (NativeCode c = api_.device_info(i, &dev); c != kNativeSuccess)
      return std::move(native_error(api_, c, "query device " + std::to_string(i)).with_context("listing devices"));
    DeviceInfo info;
    info.backend = api_.backend;
    info.index = i;
    info.name = dev.name;
    info.uuid = format_uuid(dev.uuid);
    info.driver = dev.driver;
    info.memory_bytes = dev.total_memory;
    out.push_back(std::move(info));
  }
  return out;
}

Result<std::unique_ptr<BackendDevice>> RuntimePlugin::open(const BackendConfig& config) {
  if (!config.options.empty())
    return make_error(ErrorCode::invalid_argument, "unknown option \"" + config.options.begin()->first + "\" for backend " +
                                                       api_.backend + "; it takes no options");
  auto devices = this->devices();
  if (!devices) return devices.error();
  int index = config.device_index.value_or(0);
  if (config.device_uuid) {
    index = -1;
    for (const DeviceInfo& d : *devices) {
      if (d.uuid == *config.device_uuid) index = d.index;
    }
    if (index < 0) {
      std::string known;
      for (const DeviceInfo& d : *devices) known += (known.empty() ? "" : ", ") + d.uuid;
      return make_error(ErrorCode::not_found, "no " + std::string(api_.backend) + " device has UUID " +
                                                  *config.device_uuid + "; present: " + known);
    }
  }
  if (index < 0 || index >= static_cast<int>(devices->size()))
    return make_error(ErrorCode::not_found, std::string(api_.backend) + " device " + std::to_string(index) +
                                                " does not exist; there are " + std::to_string(devices->size()));
  return RuntimeBackend::open(api_, index);
}

}  // namespace ballast::gpu
