// The device over a vendor runtime described by a RuntimeApi table: the one
// host-side implementation behind the CUDA and HIP plugins. An
// allocation's cookie is the driver's base address (the pointer handed out
// is aligned up from it), a registration's the pinned pages it uses, so no
// table of either is kept here.
#pragma once

#include "cuda_hip/host/runtime_api.hpp"

#include <ballast/plugin_abi.hpp>

#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

namespace ballast::gpu {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", the form nvidia-smi prints.
std::string format_uuid(const std::array<std::uint8_t, 16>& bytes);

// An error for a failed driver call: the vendor's error name in `native`,
// the operation in the message.
Error native_error(const RuntimeApi& api, NativeCode code, std::string_view operation);

class RuntimeBackend final : public BackendDevice {
 public:
  // Opens device `index` with its own stream.
  static Result<std::unique_ptr<BackendDevice>> open(const RuntimeApi& api, int index);
  ~RuntimeBackend() override;

 private:
  RuntimeBackend(const RuntimeApi& api, int index, void* stream, DeviceInfo info, Capabilities caps);

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

  // Makes the device current for this thread and refuses to go on after a
  // sticky error (the context is unusable; say so every time).
  Status enter(std::string_view operation);
  // Turns a driver result into a Status, remembering sticky errors.
  Status check(NativeCode code, std::string_view operation);
  Status copy(void* dst, const void* src, std::uint64_t bytes, CopyKind kind, bool wait, std::string_view operation);

  const RuntimeApi& api_;
  const int index_;
  void* const stream_;
  const DeviceInfo info_;
  const Capabilities caps_;

  // One driver registration (pinned, device-mapped pages) may serve several
  // register_host handles: a range inside one already pinned reuses it,
  // since the runtimes refuse to pin the same pages twice. Each handle's
  // cookie is its Pinned entry (a list: entries never move).
  struct Pinned {
    const void* host = nullptr;  // widened to the import alignment
    std::uint64_t bytes = 0;
    DevicePtr device = 0;
    bool read_only = false;
    int users = 0;
  };

  mutable std::mutex mutex_;
  std::list<Pinned> pinned_;
  std::optional<Error> sticky_;
};

}  // namespace ballast::gpu
