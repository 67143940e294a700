// Shared helpers of the Vulkan plugin tests.
#pragma once

#include "vulkan/backend.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ballast::vulkan::test {

// A VulkanBackend behind the core's checks (GpuBackend's public methods),
// with the backend's own counters beside them, for the plugin's own tests.
// It forwards to the backend's do_* as the core's table wrapper does.
class Checked final : public GpuBackend {
 public:
  explicit Checked(std::unique_ptr<VulkanBackend> b) : vk_(std::move(b)) {}
  ~Checked() override { release_live_ranges(); }  // as the core does before destroying a device

  bool validation_enabled() const { return vk_->validation_enabled(); }
  std::uint64_t validation_messages() const { return vk_->validation_messages(); }
  std::shared_ptr<const ValidationLog> validation_log() const { return vk_->validation_log(); }
  std::uint32_t max_groups_per_dispatch() const { return vk_->max_groups_per_dispatch(); }
  VulkanBackend::MemoryObjectCount memory_objects() const { return vk_->memory_objects(); }

 private:
  BackendDevice& d() const { return *vk_; }
  const DeviceInfo& do_info() const override { return d().do_info(); }
  const Capabilities& do_capabilities() const override { return d().do_capabilities(); }
  Result<BackendRange> do_allocate(std::uint64_t b, std::uint64_t a) override { return d().do_allocate(b, a); }
  Status do_free(const BackendRange& r, std::uint64_t b) override { return d().do_free(r, b); }
  Status do_copy_to_device(const ResolvedOperand& o, std::span<const std::byte> s) override {
    return d().do_copy_to_device(o, s);
  }
  Status do_copy_to_host(std::span<std::byte> h, const ResolvedOperand& o) override { return d().do_copy_to_host(h, o); }
  Status do_copy_device(const ResolvedOperand& t, const ResolvedOperand& f, std::uint64_t b) override {
    return d().do_copy_device(t, f, b);
  }
  Result<BackendRange> do_register_host(const void* h, std::uint64_t b, HostAccess a) override {
    return d().do_register_host(h, b, a);
  }
  Status do_unregister_host(const BackendRange& r, std::uint64_t b, HostAccess a) override {
    return d().do_unregister_host(r, b, a);
  }
  Status do_launch(const DerivationLaunch& l, const DerivationSizes& s, const LaunchOperands& o) override {
    return d().do_launch(l, s, o);
  }
  Status do_synchronize() override { return d().do_synchronize(); }

  std::unique_ptr<VulkanBackend> vk_;
};

// Opens `vulkan<suffix>` (e.g. "?validation=on"); fails the test on error.
std::unique_ptr<Checked> open(const std::string& suffix = "");

BackendConfig config(const std::string& suffix);

template <class T>
DevicePtr upload(GpuBackend& b, const std::vector<T>& values, std::uint64_t pad_front = 0) {
  auto ptr = b.allocate(values.size() * sizeof(T) + pad_front + 8, 256);
  REQUIRE(ptr.ok());
  if (!values.empty())
    REQUIRE(b.copy_to_device(*ptr, pad_front, std::as_bytes(std::span(values))).ok());
  return *ptr;
}

template <class T>
std::vector<T> download(GpuBackend& b, DevicePtr ptr, std::size_t count, std::uint64_t offset = 0) {
  std::vector<T> out(count);
  const Status s = b.copy_to_host(std::as_writable_bytes(std::span(out)), ptr, offset);
  INFO(s.to_string());
  REQUIRE(s.ok());
  return out;
}

}  // namespace ballast::vulkan::test
