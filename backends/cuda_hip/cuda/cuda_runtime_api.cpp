// The CUDA runtime behind RuntimeBackend. The runtime is linked statically
// (cudart_static), so this library loads on machines without an NVIDIA
// driver: the runtime looks for libcuda.so.1 on first use and reports its
// absence as cudaErrorInsufficientDriver, which becomes `unavailable`.
#include "cuda_runtime_api.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

namespace ballast::cuda {
namespace {

using gpu::CopyKind;
using gpu::NativeCode;

cudaError_t as_cuda(NativeCode c) { return static_cast<cudaError_t>(c); }
NativeCode as_native(cudaError_t e) { return static_cast<NativeCode>(e); }

const char* error_name(NativeCode c) { return cudaGetErrorName(as_cuda(c)); }

ErrorCode classify(NativeCode c) {
  switch (as_cuda(c)) {
    case cudaErrorMemoryAllocation: return ErrorCode::out_of_memory;
    case cudaErrorInvalidValue:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered: return ErrorCode::invalid_argument;
    case cudaErrorNotSupported: return ErrorCode::unsupported;
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice: return ErrorCode::unavailable;
    default: return ErrorCode::device_error;
  }
}

// The errors the CUDA runtime documents as corrupting the context: every
// later call in the process returns them again.
bool is_sticky(NativeCode c) {
  switch (as_cuda(c)) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable: return true;
    default: return false;
  }
}

std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string unavailable_reason(NativeCode c) {
  const std::string name = error_name(c);
  switch (as_cuda(c)) {
    case cudaErrorInsufficientDriver: {
      int driver = 0;
      cudaDriverGetVersion(&driver);
      if (driver == 0) return "no NVIDIA driver: libcuda.so.1 could not be loaded (" + name + ")";
      return "the NVIDIA driver supports CUDA " + cuda_version(driver) + " but this plugin was built with CUDA " +
             cuda_version(CUDART_VERSION) + " (" + name + ")";
    }
    case cudaErrorNoDevice: return "no CUDA device (" + name + ")";
    default: return "cudaGetDeviceCount failed: " + name;
  }
}

NativeCode device_count(int* count) { return as_native(cudaGetDeviceCount(count)); }

NativeCode device_info(int index, gpu::NativeDevice* out) {
  cudaDeviceProp p{};
  if (cudaError_t e = cudaGetDeviceProperties(&p, index); e != cudaSuccess) return as_native(e);
  out->name = p.name;
  std::memcpy(out->uuid.data(), p.uuid.bytes, out->uuid.size());
  out->total_memory = p.totalGlobalMem;
  out->can_map_host_memory = p.canMapHostMemory != 0;
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    out->driver = "CUDA driver " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) + ", runtime " +
                  std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
  int read_only = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, index); e != cudaSuccess)
    return as_native(e);
  out->read_only_registration = read_only != 0;
  return 0;
}

NativeCode set_device(int index) { return as_native(cudaSetDevice(index)); }

NativeCode device_malloc(std::uint64_t* ptr, std::uint64_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  *ptr = reinterpret_cast<std::uintptr_t>(p);
  return as_native(e);
}

NativeCode device_free(std::uint64_t ptr) { return as_native(cudaFree(reinterpret_cast<void*>(ptr))); }

NativeCode stream_create(void** stream) {
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  *stream = s;
  return as_native(e);
}

NativeCode stream_destroy(void* stream) { return as_native(cudaStreamDestroy(static_cast<cudaStream_t>(stream))); }
NativeCode stream_synchronize(void* stream) { return as_native(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

NativeCode copy_async(void* dst, const void* src, std::uint64_t bytes, CopyKind kind, void* stream) {
  const cudaMemcpyKind k = kind == CopyKind::host_to_device   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::device_to_host ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
  return as_native(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream)));
}

NativeCode host_register(const void* host, std::uint64_t bytes, bool read_only) {
  // The runtime never writes through a read-only registration; the
  // non-const pointer is only its signature.
  const unsigned flags = cudaHostRegisterMapped | (read_only ? cudaHostRegisterReadOnly : 0u);
  return as_native(cudaHostRegister(const_cast<void*>(host), bytes, flags));
}

NativeCode host_unregister(const void* host) { return as_native(cudaHostUnregister(const_cast<void*>(host))); }

NativeCode host_device_pointer(std::uint64_t* device, const void* host) {
  void* p = nullptr;
  const cudaError_t e = cudaHostGetDevicePointer(&p, const_cast<void*>(host), 0);
  *device = reinterpret_cast<std::uintptr_t>(p);
  return as_native(e);
}

int enqueue(const gpu::KernelArgs& args, void* stream) { return gpu::enqueue_derivation(args, stream); }

gpu::RuntimeApi make_api() {
  gpu::RuntimeApi api;
  api.backend = "cuda";
  api.import_alignment = 1;  // cudaHostRegister takes any range and pins whole pages itself
  api.registration_note = "the device does not support read-only host registration (cudaDevAttrHostRegisterReadOnlySupported is 0)";
  BALLAST_RUNTIME_API_BIND(api)
  return api;
}

}  // namespace

const gpu::RuntimeApi& runtime_api() {
  static const gpu::RuntimeApi api = make_api();
  return api;
}

}  // namespace ballast::cuda
