#include "support/forwarding.hpp"
#include "support/fault_injecting_backend.hpp"

#include <algorithm>
#include <utility>

namespace ballast::testing {
namespace {

std::size_t index_of(FaultOp op) noexcept { return static_cast<std::size_t>(op); }

// The driver call behind each operation, and what it reports when the
// device runs out of memory or is lost.
struct VendorError {
  ErrorCode code;
  const char* call;    // the driver entry point that failed
  const char* native;  // its name for the error
};

VendorError vendor_error(std::string_view backend, FaultOp op) {
  const bool memory = op == FaultOp::allocate || op == FaultOp::register_host;
  if (backend == "vulkan") {
    switch (op) {
      case FaultOp::allocate: return {ErrorCode::out_of_memory, "vkAllocateMemory", "VK_ERROR_OUT_OF_DEVICE_MEMORY"};
      case FaultOp::register_host:
        return {ErrorCode::out_of_memory, "vkAllocateMemory (imported host pointer)", "VK_ERROR_OUT_OF_DEVICE_MEMORY"};
      case FaultOp::free:
      case FaultOp::unregister_host: return {ErrorCode::device_error, "vkQueueWaitIdle", "VK_ERROR_DEVICE_LOST"};
      case FaultOp::synchronize: return {ErrorCode::device_error, "vkWaitForFences", "VK_ERROR_DEVICE_LOST"};
      default: return {ErrorCode::device_error, "vkQueueSubmit", "VK_ERROR_DEVICE_LOST"};
    }
  }
  if (backend == "cuda") {
    switch (op) {
      case FaultOp::allocate: return {ErrorCode::out_of_memory, "cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY"};
      case FaultOp::register_host: return {ErrorCode::out_of_memory, "cuMemHostRegister", "CUDA_ERROR_OUT_OF_MEMORY"};
      case FaultOp::free: return {ErrorCode::device_error, "cuMemFree", "CUDA_ERROR_ILLEGAL_ADDRESS"};
      case FaultOp::unregister_host:
        return {ErrorCode::device_error, "cuMemHostUnregister", "CUDA_ERROR_ILLEGAL_ADDRESS"};
      case FaultOp::launch: return {ErrorCode::device_error, "cuLaunchKernel", "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"};
      case FaultOp::synchronize: return {ErrorCode::device_error, "cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS"};
      default: return {ErrorCode::device_error, "cuMemcpy", "CUDA_ERROR_ILLEGAL_ADDRESS"};
    }
  }
  if (backend == "hip") {
    switch (op) {
      case FaultOp::allocate: return {ErrorCode::out_of_memory, "hipMalloc", "hipErrorOutOfMemory"};
      case FaultOp::register_host: return {ErrorCode::out_of_memory, "hipHostRegister", "hipErrorOutOfMemory"};
      case FaultOp::free: return {ErrorCode::device_error, "hipFree", "hipErrorIllegalAddress"};
      case FaultOp::unregister_host: return {ErrorCode::device_error, "hipHostUnregister", "hipErrorIllegalAddress"};
      case FaultOp::launch: return {ErrorCode::device_error, "hipModuleLaunchKernel", "hipErrorLaunchFailure"};
      case FaultOp::synchronize: return {ErrorCode::device_error, "hipStreamSynchronize", "hipErrorIllegalAddress"};
      default: return {ErrorCode::device_error, "hipMemcpy", "hipErrorIllegalAddress"};
    }
  }
  if (backend == "cpu") {  // the host: memory runs out; nothing else fails on its own
    if (op == FaultOp::allocate) return {ErrorCode::out_of_memory, "aligned_alloc", "ENOMEM"};
    if (op == FaultOp::register_host) return {ErrorCode::out_of_memory, "mlock", "ENOMEM"};
  }
  return memory ? VendorError{ErrorCode::out_of_memory, "the device", "FAULT_OUT_OF_MEMORY"}
                : VendorError{ErrorCode::device_error, "the device", "FAULT_DEVICE_ERROR"};
}

}  // namespace

std::string_view fault_op_name(FaultOp op) noexcept {
  switch (op) {
    case FaultOp::allocate: return "allocate";
    case FaultOp::free: return "free";
    case FaultOp::register_host: return "register_host";
    case FaultOp::unregister_host: return "unregister_host";
    case FaultOp::copy_to_device: return "copy_to_device";
    case FaultOp::copy_to_host: return "copy_to_host";
    case FaultOp::copy_device: return "copy_device";
    case FaultOp::launch: return "launch";
    case FaultOp::synchronize: return "synchronize";
  }
  return "?";
}

std::string_view fault_op_words(FaultOp op) noexcept {
  switch (op) {
    case FaultOp::allocate: return "allocate";
    case FaultOp::free: return "free";
    case FaultOp::register_host: return "register";
    case FaultOp::unregister_host: return "unregister host memory";
    case FaultOp::copy_to_device: return "host to device";
    case FaultOp::copy_to_host: return "device to host";
    case FaultOp::copy_device: return "device to device";
    case FaultOp::launch: return "launch";
    case FaultOp::synchronize: return "synchronize";
  }
  return "?";
}

Error realistic_error(std::string_view backend, FaultOp op) {
  const VendorError v = vendor_error(backend, op);
  Error e = make_error(v.code, std::string(v.call) + " failed with " + v.native);
  e.native = v.native;
  return e;
}

FaultInjectingBackend::FaultInjectingBackend(GpuBackend& inner) : inner_(inner) {}
FaultInjectingBackend::~FaultInjectingBackend() = default;

void FaultInjectingBackend::fail_nth(FaultOp op, std::uint64_t nth, Fault mode, std::optional<Error> error) {
  std::lock_guard lock(mutex_);
  calls_ = {};
  armed_ = nth != 0;
  tripped_ = false;
  op_ = op;
  nth_ = nth;
  mode_ = mode;
  error_ = std::move(error);
  injected_.clear();
}

void FaultInjectingBackend::disarm() {
  std::lock_guard lock(mutex_);
  armed_ = false;
  tripped_ = false;
}

void FaultInjectingBackend::reset_counts() {
  std::lock_guard lock(mutex_);
  calls_ = {};
  armed_ = false;
  tripped_ = false;
}

std::uint64_t FaultInjectingBackend::calls(FaultOp op) const {
  std::lock_guard lock(mutex_);
  return calls_[index_of(op)];
}

std::vector<InjectedFault> FaultInjectingBackend::injected() const {
  std::lock_guard lock(mutex_);
  return injected_;
}

std::vector<DevicePtr> FaultInjectingBackend::kept_allocations() const {
  std::lock_guard lock(mutex_);
  return kept_allocations_;
}

std::vector<DevicePtr> FaultInjectingBackend::kept_registrations() const {
  std::lock_guard lock(mutex_);
  return kept_registrations_;
}

std::optional<Error> FaultInjectingBackend::count(FaultOp op, DevicePtr ptr, std::uint64_t bytes) {
  if (before_call) before_call(op);
  std::lock_guard lock(mutex_);
  const std::uint64_t call = ++calls_[index_of(op)];
  if (!armed_) return std::nullopt;
  if (mode_ == Fault::op_from_then_on) {
    if (op != op_ || call < nth_) return std::nullopt;
  } else if (!tripped_) {
    if (op != op_ || call != nth_) return std::nullopt;
    if (mode_ == Fault::from_then_on) tripped_ = true;
  }
  Error e;
  if (error_ && op == op_ && call == nth_) {
    e = *error_;
  } else {
    e = realistic_error(inner_.info().backend, op);
    e.message += " (injected at call " + std::to_string(call) + " of " + std::string(fault_op_name(op)) + ")";
  }
  injected_.push_back(InjectedFault{op, call, e, ptr, bytes});
  // Listed once however often its free is refused (a Residency asks again
  // for a stuck free whenever room is short): one later free ends it.
  auto keep = [ptr](std::vector<DevicePtr>& kept) {
    if (std::find(kept.begin(), kept.end(), ptr) == kept.end()) kept.push_back(ptr);
  };
  if (op == FaultOp::free) keep(kept_allocations_);
  if (op == FaultOp::unregister_host) keep(kept_registrations_);
  return e;
}

void FaultInjectingBackend::forget_kept(std::vector<DevicePtr>& kept, DevicePtr ptr) {
  std::lock_guard lock(mutex_);
  if (auto it = std::find(kept.begin(), kept.end(), ptr); it != kept.end()) kept.erase(it);
}

const DeviceInfo& FaultInjectingBackend::do_info() const { return inner_.info(); }
const Capabilities& FaultInjectingBackend::do_capabilities() const { return inner_.capabilities(); }

Result<BackendRange> FaultInjectingBackend::do_allocate(std::uint64_t bytes, std::uint64_t alignment) {
  if (auto e = count(FaultOp::allocate)) return std::move(*e);
  return ::ballast::testing::forwarded(inner_.allocate(bytes, alignment));
}

Status FaultInjectingBackend::do_free(const BackendRange& ptr_in, std::uint64_t bytes) { const DevicePtr ptr = ptr_in.ptr;
  if (auto e = count(FaultOp::free, ptr, bytes)) return std::move(*e);
  Status s = inner_.free(ptr);
  if (s.ok()) forget_kept(kept_allocations_, ptr);
  return s;
}

Status FaultInjectingBackend::do_copy_to_device(const ResolvedOperand& dst_in, std::span<const std::byte> src) { const DevicePtr dst = dst_in.ptr;
  if (auto e = count(FaultOp::copy_to_device)) return std::move(*e);
  return inner_.copy_to_device(dst, 0, src);
}

Status FaultInjectingBackend::do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src_in) { const DevicePtr src = src_in.ptr;
  if (auto e = count(FaultOp::copy_to_host)) return std::move(*e);
  return inner_.copy_to_host(dst, src, 0);
}

Status FaultInjectingBackend::do_copy_device(const ResolvedOperand& dst_in, const ResolvedOperand& src_in, std::uint64_t bytes) { const DevicePtr dst = dst_in.ptr, src = src_in.ptr;
  if (auto e = count(FaultOp::copy_device)) return std::move(*e);
  return inner_.copy_device(dst, 0, src, 0, bytes);
}

Result<BackendRange> FaultInjectingBackend::do_register_host(const void* host, std::uint64_t bytes, HostAccess access) {
  if (auto e = count(FaultOp::register_host)) return std::move(*e);
  return ::ballast::testing::forwarded(inner_.register_host(host, bytes, access));
}

Status FaultInjectingBackend::do_unregister_host(const BackendRange& ptr_in, std::uint64_t bytes, HostAccess) { const DevicePtr ptr = ptr_in.ptr;
  if (auto e = count(FaultOp::unregister_host, ptr, bytes)) return std::move(*e);
  Status s = inner_.unregister_host(ptr);
  if (s.ok()) forget_kept(kept_registrations_, ptr);
  return s;
}

Status FaultInjectingBackend::do_launch(const DerivationLaunch& launch, const DerivationSizes&, const LaunchOperands&) {
  if (auto e = count(FaultOp::launch)) return std::move(*e);
  return inner_.launch(launch);
}

Status FaultInjectingBackend::do_synchronize() {
  auto e = count(FaultOp::synchronize);
  Status waited = inner_.synchronize();  // drained either way: the caller may free what the work used
  if (e) return std::move(*e);
  return waited;
}

}  // namespace ballast::testing
