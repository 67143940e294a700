// RecordingBackend: a GpuBackend test double that hands out fake addresses
// and records every free, so tests can prove who freed what and how often.
#pragma once

#include <ballast/derived_weights.hpp>
#include <ballast/gpu_backend.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace ballast::test {

// A memo key naming only a source pointer: what most memo tests need (the
// other fields are tested where they matter).
inline DerivationKey key_of(std::uint64_t source) {
  DerivationKey k;
  k.source = source;
  return k;
}


class RecordingBackend final : public GpuBackend {
 public:
  RecordingBackend() {
    info_.backend = "recording";
    info_.name = "recording test double";
  }

  // Makes free(ptr) fail with device_error (the pointer stays live).
  void refuse(DevicePtr ptr) {
    std::lock_guard lock(mutex_);
    refuse_.insert(ptr);
  }

  // Makes the next free(ptr) fail with device_error, as a backend reporting
  // an earlier asynchronous error does on the next call it takes.
  void refuse_once(DevicePtr ptr) {
    std::lock_guard lock(mutex_);
    refuse_once_.insert(ptr);
  }

  // What the core does before destroying a device (TableBackend's destructor).
  void release_everything() { release_live_ranges(); }

  // Every free call, in order, including refused and bad ones.
  std::vector<DevicePtr> freed() const {
    std::lock_guard lock(mutex_);
    return freed_;
  }
  std::size_t times_freed(DevicePtr ptr) const {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (DevicePtr p : freed_) n += p == ptr ? 1 : 0;
    return n;
  }
  std::size_t bad_frees() const {
    std::lock_guard lock(mutex_);
    return bad_frees_;
  }
  bool is_live(DevicePtr ptr) const {
    std::lock_guard lock(mutex_);
    return live_.count(ptr) != 0;
  }

  // Gives the double host registration, honouring read-only or not (it
  // has none until then): a registration that reaches it is counted and
  // served at the host address.
  void allow_registration(bool read_only) {
    caps_.host_registration = true;
    caps_.read_only_registration = read_only;
    caps_.host_registration_note = read_only ? "" : "the recording double ignores access modes";
  }
  std::size_t registrations() const {
    std::lock_guard lock(mutex_);
    return registrations_;
  }

 private:
  const DeviceInfo& do_info() const override { return info_; }
  const Capabilities& do_capabilities() const override { return caps_; }

  Result<BackendRange> do_allocate(std::uint64_t /*bytes*/, std::uint64_t /*alignment*/) override {
    std::lock_guard lock(mutex_);
    const DevicePtr ptr = next_;
    next_ += 0x1000;
    live_.insert(ptr);
    return BackendRange{ptr, ptr};
  }

  Status do_free(const BackendRange& ptr_in, std::uint64_t) override { const DevicePtr ptr = ptr_in.ptr;
    std::lock_guard lock(mutex_);
    freed_.push_back(ptr);
    if (refuse_.count(ptr) != 0) return make_error(ErrorCode::device_error, "refused by the test");
    if (refuse_once_.erase(ptr) != 0) return make_error(ErrorCode::device_error, "refused once by the test");
    if (live_.erase(ptr) == 0) {
      bad_frees_ += 1;
      return make_error(ErrorCode::internal, "free of an unknown or already freed pointer reached the backend");
    }
    return {};
  }

  Status do_copy_to_device(const ResolvedOperand&, std::span<const std::byte>) override { return unsupported(); }
  Status do_copy_to_host(std::span<std::byte>, const ResolvedOperand&) override { return unsupported(); }
  Status do_copy_device(const ResolvedOperand&, const ResolvedOperand&, std::uint64_t) override { return unsupported(); }
  Result<BackendRange> do_register_host(const void* host, std::uint64_t, HostAccess) override {
    if (!caps_.host_registration) return unsupported();
    std::lock_guard lock(mutex_);
    registrations_ += 1;
    const auto address = static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(host));
    return BackendRange{address, address};
  }
  Status do_unregister_host(const BackendRange&, std::uint64_t, HostAccess) override {
    if (!caps_.host_registration) return unsupported();
    return {};
  }
  Status do_launch(const DerivationLaunch&, const DerivationSizes&, const LaunchOperands&) override { return unsupported(); }
  Status do_synchronize() override { return {}; }

  static Error unsupported() { return make_error(ErrorCode::unsupported, "not part of the recording double"); }

  DeviceInfo info_;
  Capabilities caps_;
  mutable std::mutex mutex_;
  DevicePtr next_ = 0x10000;
  std::set<DevicePtr> live_;
  std::set<DevicePtr> refuse_;
  std::set<DevicePtr> refuse_once_;
  std::vector<DevicePtr> freed_;
  std::size_t bad_frees_ = 0;
  std::size_t registrations_ = 0;
};

}  // namespace ballast::test
