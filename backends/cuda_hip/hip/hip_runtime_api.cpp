// The HIP runtime behind RuntimeBackend. libamdhip64 loads without a GPU;
// with no ROCm kernel driver (/dev/kfd) or no device, hipGetDeviceCount
// fails and the plugin reports `unavailable` with the reason.
#include "hip_runtime_api.hpp"

#include <hip/hip_runtime_api.h>

#include <cstring>
#include <string>
#include <sys/stat.h>

namespace ballast::hip {
namespace {

using gpu::CopyKind;
using gpu::NativeCode;

hipError_t as_hip(NativeCode c) { return static_cast<hipError_t>(c); }
NativeCode as_native(hipError_t e) { return static_cast<NativeCode>(e); }

const char* error_name(NativeCode c) { return hipGetErrorName(as_hip(c)); }

ErrorCode classify(NativeCode c) {
  switch (as_hip(c)) {
    case hipErrorOutOfMemory: return ErrorCode::out_of_memory;
    case hipErrorInvalidValue:
    case hipErrorHostMemoryAlreadyRegistered:
    case hipErrorHostMemoryNotRegistered: return ErrorCode::invalid_argument;
    case hipErrorNotSupported: return ErrorCode::unsupported;
    case hipErrorInsufficientDriver:
    case hipErrorNoDevice: return ErrorCode::unavailable;
    default: return ErrorCode::device_error;
  }
}

// Faults in a kernel leave the HIP context unusable, as in CUDA.
bool is_sticky(NativeCode c) {
  switch (as_hip(c)) {
    case hipErrorIllegalAddress:
    case hipErrorLaunchFailure:
    case hipErrorAssert:
    case hipErrorLaunchTimeOut:
    case hipErrorECCNotCorrectable: return true;
    default: return false;
  }
}

bool exists(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0;
}

std::string unavailable_reason(NativeCode c) {
  const std::string name = error_name(c);
  switch (as_hip(c)) {
    case hipErrorNoDevice:
      if (!exists("/dev/kfd")) return "no ROCm device: /dev/kfd is missing (the amdgpu kernel driver is not loaded) (" + name + ")";
      return "no ROCm device visible to this process (" + name + ")";
    case hipErrorInsufficientDriver: return "the ROCm kernel driver is too old for this HIP runtime (" + name + ")";
    default: return "hipGetDeviceCount failed: " + name;
  }
}

NativeCode device_count(int* count) { return as_native(hipGetDeviceCount(count)); }

NativeCode device_info(int index, gpu::NativeDevice* out) {
  hipDeviceProp_t p{};
  if (hipError_t e = hipGetDeviceProperties(&p, index); e != hipSuccess) return as_native(e);
  out->name = p.name;
  out->total_memory = p.totalGlobalMem;
  out->can_map_host_memory = p.canMapHostMemory != 0;
  int driver = 0, runtime = 0;
  if (hipDriverGetVersion(&driver) == hipSuccess && hipRuntimeGetVersion(&runtime) == hipSuccess)
    out->driver = "HIP driver " + std::to_string(driver) + ", runtime " + std::to_string(runtime);
  out->read_only_registration = false;  // HIP 5.2 has no read-only registration flag
  hipDevice_t device = 0;
  if (hipError_t e = hipDeviceGet(&device, index); e != hipSuccess) return as_native(e);
  hipUUID uuid{};
  if (hipError_t e = hipDeviceGetUuid(&uuid, device); e != hipSuccess) return as_native(e);
  std::memcpy(out->uuid.data(), uuid.bytes, out->uuid.size());
  return 0;
}

NativeCode set_device(int index) { return as_native(hipSetDevice(index)); }

NativeCode device_malloc(std::uint64_t* ptr, std::uint64_t bytes) {
  void* p = nullptr;
  const hipError_t e = hipMalloc(&p, bytes);
  *ptr = reinterpret_cast<std::uintptr_t>(p);
  return as_native(e);
}

NativeCode device_free(std::uint64_t ptr) { return as_native(hipFree(reinterpret_cast<void*>(ptr))); }

NativeCode stream_create(void** stream) {
  hipStream_t s = nullptr;
  const hipError_t e = hipStreamCreateWithFlags(&s, hipStreamNonBlocking);
  *stream = s;
  return as_native(e);
}

NativeCode stream_destroy(void* stream) { return as_native(hipStreamDestroy(static_cast<hipStream_t>(stream))); }
NativeCode stream_synchronize(void* stream) { return as_native(hipStreamSynchronize(static_cast<hipStream_t>(stream))); }

NativeCode copy_async(void* dst, const void* src, std::uint64_t bytes, CopyKind kind, void* stream) {
  const hipMemcpyKind k = kind == CopyKind::host_to_device   ? hipMemcpyHostToDevice
                          : kind == CopyKind::device_to_host ? hipMemcpyDeviceToHost
                                                             : hipMemcpyDeviceToDevice;
  return as_native(hipMemcpyAsync(dst, src, bytes, k, static_cast<hipStream_t>(stream)));
}

NativeCode host_register(const void* host, std::uint64_t bytes, bool /*read_only: not expressible in HIP 5.2*/) {
  return as_native(hipHostRegister(const_cast<void*>(host), bytes, hipHostRegisterMapped));
}

NativeCode host_unregister(const void* host) { return as_native(hipHostUnregister(const_cast<void*>(host))); }

NativeCode host_device_pointer(std::uint64_t* device, const void* host) {
  void* p = nullptr;
  const hipError_t e = hipHostGetDevicePointer(&p, const_cast<void*>(host), 0);
  *device = reinterpret_cast<std::uintptr_t>(p);
  return as_native(e);
}

int enqueue(const gpu::KernelArgs& args, void* stream) { return gpu::enqueue_derivation(args, stream); }

gpu::RuntimeApi make_api() {
  gpu::RuntimeApi api;
  api.backend = "hip";
  // ROCm pins whole pages; registering page-aligned ranges keeps two
  // registrations that share a page from colliding in the driver.
  api.import_alignment = 4096;
  api.registration_note =
      "HIP 5.2 has no read-only host registration flag: read-only mappings may fail to register "
      "(callers then upload); ballast itself never writes through a read-only registration";
  BALLAST_RUNTIME_API_BIND(api)
  return api;
}

}  // namespace

const gpu::RuntimeApi& runtime_api() {
  static const gpu::RuntimeApi api = make_api();
  return api;
}

}  // namespace ballast::hip
