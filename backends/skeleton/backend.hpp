// The skeleton's device: every operation refused as `unsupported`. A real
// backend replaces each body with its device work; the core has already
// checked every argument (docs/plugins.md, "Implementing BackendDevice").
#pragma once

#include <ballast/plugin_abi.hpp>

namespace ballast::skeleton {

class SkeletonDevice final : public BackendDevice {
 public:
  explicit SkeletonDevice(DeviceInfo info);

  const DeviceInfo& do_info() const override { return info_; }
  const Capabilities& do_capabilities() const override { return caps_; }
  Result<BackendRange> do_allocate(std::uint64_t bytes, std::uint64_t alignment) override;
  Status do_free(const BackendRange& allocation, std::uint64_t bytes) override;
  Status do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) override;
  Status do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) override;
  Status do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) override;
  Result<BackendRange> do_register_host(const void* host, std::uint64_t bytes, HostAccess access) override;
  Status do_unregister_host(const BackendRange& registration, std::uint64_t bytes, HostAccess access) override;
  Status do_launch(const DerivationLaunch& launch, const DerivationSizes& sizes, const LaunchOperands& operands) override;
  Status do_synchronize() override;

 private:
  DeviceInfo info_;
  Capabilities caps_;
};

// The one device the skeleton lists.
DeviceInfo skeleton_device();

}  // namespace ballast::skeleton
