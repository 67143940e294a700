// BackendPlugin over a RuntimeApi: device enumeration with a specific
// `unavailable` reason, and opening a device by index or UUID.
#pragma once

#include "cuda_hip/host/runtime_api.hpp"

#include <ballast/plugin_abi.hpp>

namespace ballast::gpu {

class RuntimePlugin final : public BackendPlugin {
 public:
  explicit RuntimePlugin(const RuntimeApi& api) : api_(api) {}

  Result<std::vector<DeviceInfo>> devices() override;
  Result<std::unique_ptr<BackendDevice>> open(const BackendConfig& config) override;

 private:
  const RuntimeApi& api_;
};

}  // namespace ballast::gpu
