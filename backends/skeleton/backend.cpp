#include "skeleton/backend.hpp"

#include <string>

namespace ballast::skeleton {
namespace {

Error unsupported(const char* operation) {
  return make_error(ErrorCode::unsupported, std::string(operation) +
                                                " is not implemented: skeleton is a template backend "
                                                "(copy backends/skeleton/ and fill in backend.cpp)");
}

}  // namespace

DeviceInfo skeleton_device() {
  DeviceInfo d;
  d.backend = "skeleton";
  d.index = 0;
  d.name = "skeleton device (does nothing)";
  d.uuid = "GPU-00000000-0000-0000-0000-000000005ce1";
  d.driver = "none";
  return d;
}

SkeletonDevice::SkeletonDevice(DeviceInfo info) : info_(std::move(info)) {
  caps_.host_registration = false;
  caps_.host_registration_note = "skeleton: a template backend implements nothing";
}

Result<BackendRange> SkeletonDevice::do_allocate(std::uint64_t, std::uint64_t) { return unsupported("allocation"); }
Status SkeletonDevice::do_free(const BackendRange&, std::uint64_t) { return unsupported("free"); }
Status SkeletonDevice::do_copy_to_device(const ResolvedOperand&, std::span<const std::byte>) {
  return unsupported("copy to device");
}
Status SkeletonDevice::do_copy_to_host(std::span<std::byte>, const ResolvedOperand&) { return unsupported("copy to host"); }
Status SkeletonDevice::do_copy_device(const ResolvedOperand&, const ResolvedOperand&, std::uint64_t) {
  return unsupported("device copy");
}
Result<BackendRange> SkeletonDevice::do_register_host(const void*, std::uint64_t, HostAccess) {
  return unsupported("host registration");
}
Status SkeletonDevice::do_unregister_host(const BackendRange&, std::uint64_t, HostAccess) {
  return unsupported("host unregistration");
}
Status SkeletonDevice::do_launch(const DerivationLaunch&, const DerivationSizes&, const LaunchOperands&) {
  return unsupported("launch");
}
Status SkeletonDevice::do_synchronize() { return {}; }  // nothing was ever enqueued

}  // namespace ballast::skeleton
