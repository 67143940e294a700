#include "cuda_hip/host/backend.hpp"

#include <ballast/dtype.hpp>

#include <cstddef>
#include <cstdio>
#include <new>
#include <string>
#include <utility>

namespace ballast::gpu {
namespace {

static_assert(static_cast<int>(KernelType::bfloat16) == static_cast<int>(DataType::bfloat16));
static_assert(static_cast<int>(KernelType::float16) == static_cast<int>(DataType::float16));

// do_launch passes a GGUF kind's block type through as KernelType: every
// type the kinds read must have the same number on both sides.
constexpr bool gguf_types_match() {
  constexpr KernelType kKernel[] = {KernelType::float32, KernelType::float16, KernelType::bfloat16, KernelType::q4_0,
                                    KernelType::q4_1,    KernelType::q5_0,    KernelType::q5_1,     KernelType::q8_0,
                                    KernelType::q2_k,    KernelType::q3_k,    KernelType::q4_k,     KernelType::q5_k,
                                    KernelType::q6_k,    KernelType::q8_k};
  if (sizeof(kKernel) / sizeof(kKernel[0]) != sizeof(kinds::kGgufBlocks) / sizeof(kinds::kGgufBlocks[0])) return false;
  for (std::size_t i = 0; i < sizeof(kKernel) / sizeof(kKernel[0]); ++i)
    if (static_cast<std::uint32_t>(kKernel[i]) != static_cast<std::uint32_t>(kinds::kGgufBlocks[i].type)) return false;
  return true;
}
static_assert(gguf_types_match(), "KernelType numbers every GGUF block type as DataType does");

bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) { return __builtin_add_overflow(a, b, &out); }

void* as_pointer(std::uint64_t address) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)); }

}  // namespace

std::string format_uuid(const std::array<std::uint8_t, 16>& b) {
  std::string s = "GPU-";
  static constexpr char kDigits[] = "0123456789abcdef";
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += kDigits[b[i] >> 4];
    s += kDigits[b[i] & 0xf];
  }
  return s;
}

Error native_error(const RuntimeApi& api, NativeCode code, std::string_view operation) {
  const char* name = api.error_name(code);
  Error e = make_error(api.classify(code), std::string(operation) + " failed: " + name);
  e.native = name;
  return e;
}

Result<std::unique_ptr<BackendDevice>> RuntimeBackend::open(const RuntimeApi& api, int index) {
  const std::string where = std::string(api.backend) + " device " + std::to_string(index);
  if (NativeCode c = api.set_device(index); c != kNativeSuccess)
    return std::move(native_error(api, c, "select " + where).with_context("opening " + where));
  NativeDevice dev;
  if (NativeCode c = api.device_info(index, &dev); c != kNativeSuccess)
    return std::move(native_error(api, c, "query " + where).with_context("opening " + where));
  void* stream = nullptr;
  if (NativeCode c = api.stream_create(&stream); c != kNativeSuccess)
    return std::move(native_error(api, c, "create a stream").with_context("opening " + where));

  DeviceInfo info;
  info.backend = api.backend;
  info.index = index;
  info.name = dev.name;
  info.uuid = format_uuid(dev.uuid);
  info.driver = dev.driver;
  info.memory_bytes = dev.total_memory;

  Capabilities caps;
  caps.host_registration = dev.can_map_host_memory;
  caps.read_only_registration = dev.can_map_host_memory && dev.read_only_registration;
  caps.import_alignment = api.import_alignment;
  caps.max_single_allocation = dev.total_memory;
  if (!dev.can_map_host_memory) {
    caps.host_registration_note = "the device cannot map host memory";
  } else if (!caps.read_only_registration) {
    caps.host_registration_note = api.registration_note;
  }
  return std::unique_ptr<BackendDevice>(new RuntimeBackend(api, index, stream, std::move(info), std::move(caps)));
}

RuntimeBackend::RuntimeBackend(const RuntimeApi& api, int index, void* stream, DeviceInfo info, Capabilities caps)
    : api_(api), index_(index), stream_(stream), info_(std::move(info)), caps_(std::move(caps)) {}

RuntimeBackend::~RuntimeBackend() {
  // Best effort: a destructor has nobody to report to. The core freed and
  // unregistered what the caller leaked before destroying this.
  api_.set_device(index_);
  api_.stream_synchronize(stream_);
  api_.stream_destroy(stream_);
}

Status RuntimeBackend::check(NativeCode code, std::string_view operation) {
  if (code == kNativeSuccess) return {};
  Error e = native_error(api_, code, operation);
  if (api_.is_sticky(code)) {
    std::lock_guard lock(mutex_);
    if (!sticky_) sticky_ = e;
  }
  return e;
}

Status RuntimeBackend::enter(std::string_view operation) {
  {
    std::lock_guard lock(mutex_);
    if (sticky_) {
      Error e = *sticky_;
      e.code = ErrorCode::device_error;
      e.message = std::string(operation) + " refused: the " + api_.backend +
                  " context is unusable after an earlier error (" + sticky_->message + ")";
      return e;
    }
  }
  return check(api_.set_device(index_), "select device " + std::to_string(index_));
}

Status RuntimeBackend::copy(void* dst, const void* src, std::uint64_t bytes, CopyKind kind, bool wait,
                            std::string_view operation) {
  if (Status s = enter(operation); !s) return s;
  if (Status s = check(api_.copy_async(dst, src, bytes, kind, stream_), operation); !s) return s;
  // Host spans belong to the caller once we return, so host transfers finish here.
  if (wait) return check(api_.stream_synchronize(stream_), std::string(operation) + " (waiting for the stream)");
  return {};
}

Result<BackendRange> RuntimeBackend::do_allocate(std::uint64_t bytes, std::uint64_t alignment) {
  // The runtime aligns to at least 256 bytes; stricter alignment over-allocates.
  std::uint64_t request = bytes == 0 ? 1 : bytes;
  if (alignment > 256 && add_overflows(request, alignment - 1, request))
    return make_error(ErrorCode::overflow, std::to_string(bytes) + " bytes plus alignment overflows");
  if (Status s = enter("allocate"); !s) return s;
  // Serialised, as before the cookie replaced the backend's table: the
  // runtimes' allocator is shared by every thread of the context.
  std::lock_guard lock(mutex_);
  DevicePtr base = 0;
  if (NativeCode c = api_.device_malloc(&base, request); c != kNativeSuccess) {
    Error e = native_error(api_, c, "device allocation");
    if (api_.is_sticky(c) && !sticky_) sticky_ = e;
    return e;
  }
  return BackendRange{(base + alignment - 1) & ~(alignment - 1), base};
}

Status RuntimeBackend::do_free(const BackendRange& allocation, std::uint64_t) {
  if (Status s = enter("free"); !s) return s;
  return check(api_.device_free(allocation.cookie), "free");
}

Status RuntimeBackend::do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) {
  return copy(as_pointer(dst.ptr), src.data(), src.size(), CopyKind::host_to_device, true, "host-to-device copy");
}

Status RuntimeBackend::do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) {
  return copy(dst.data(), as_pointer(src.ptr), dst.size(), CopyKind::device_to_host, true, "device-to-host copy");
}

Status RuntimeBackend::do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) {
  return copy(as_pointer(dst.ptr), as_pointer(src.ptr), bytes, CopyKind::device_to_device, false, "device-to-device copy");
}

Result<BackendRange> RuntimeBackend::do_register_host(const void* host, std::uint64_t bytes, HostAccess access) {
  const bool read_only = access == HostAccess::read_only;
  const std::uint64_t a = caps_.import_alignment;
  const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(host));
  std::uint64_t end = 0;
  if (add_overflows(address, bytes, end) || add_overflows(end, a - 1, end))
    return make_error(ErrorCode::overflow, "the range widened to the import alignment wraps the address space");
  const std::uint64_t base = address & ~(a - 1);
  end &= ~(a - 1);
  const char* op = "host registration";
  if (Status s = enter(op); !s) return s;

  std::lock_guard lock(mutex_);
  Pinned* pin = nullptr;
  for (Pinned& p : pinned_) {
    const auto p_base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p.host));
    if (p_base <= base && end <= p_base + p.bytes && (read_only || !p.read_only)) pin = &p;
  }
  try {
    if (pin == nullptr) {
      Pinned fresh;
      fresh.host = as_pointer(base);
      fresh.bytes = end - base;
      fresh.read_only = read_only;
      pinned_.emplace_back();  // before pinning: a failure to record it leaves nothing pinned
      if (NativeCode c = api_.host_register(fresh.host, fresh.bytes, read_only); c != kNativeSuccess) {
        pinned_.pop_back();
        return native_error(api_, c, op);
      }
      if (NativeCode c = api_.host_device_pointer(&fresh.device, fresh.host); c != kNativeSuccess) {
        api_.host_unregister(fresh.host);
        pinned_.pop_back();
        return native_error(api_, c, std::string(op) + " (device pointer)");
      }
      pinned_.back() = fresh;
      pin = &pinned_.back();
    }
    const auto pin_base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pin->host));
    ++pin->users;
    return BackendRange{pin->device + (address - pin_base),
                        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pin))};
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::out_of_memory, "no host memory to record the registration");
  }
}

Status RuntimeBackend::do_unregister_host(const BackendRange& registration, std::uint64_t, HostAccess) {
  const void* release = nullptr;
  {
    std::lock_guard lock(mutex_);
    const auto* pin = reinterpret_cast<const Pinned*>(static_cast<std::uintptr_t>(registration.cookie));
    for (auto it = pinned_.begin(); it != pinned_.end(); ++it) {
      if (&*it != pin) continue;
      if (--it->users == 0) {
        release = it->host;
        pinned_.erase(it);
      }
      break;
    }
  }
  if (release == nullptr) return {};  // other handles still use the pinned pages
  const char* op = "host unregistration";
  if (Status s = enter(op); !s) return s;
  // Kernels still queued may read the range: let them finish first.
  const Status drained = check(api_.stream_synchronize(stream_), std::string(op) + " (waiting for the stream)");
  const Status released = check(api_.host_unregister(release), op);
  return drained.ok() ? released : drained;
}

Status RuntimeBackend::do_launch(const DerivationLaunch& l, const DerivationSizes&, const LaunchOperands&) {
  const bool zero_points = l.zero_points != ZeroPoints::absent;
  const bool int4 = l.kind == Derivation::dequant_int4 || l.kind == Derivation::repack_int4;
  const char* op = "kernel enqueue";
  if (Status st = enter(op); !st) return st;
  KernelArgs a;
  a.kind = l.kind;
  a.src_type = static_cast<KernelType>(l.src_type);
  a.element_bytes = dtype_bits(l.src_type) / 8;
  a.block_size = l.block_size;
  a.zero_points = l.zero_points;
  a.rows = l.rows;
  a.cols = l.cols;
  a.src = l.src;
  // The int4 kinds' scales, and quant_int8_given_max's row maxima.
  a.scales = int4 || l.kind == Derivation::quant_int8_given_max ? l.scales : 0;
  a.zero_point = int4 && zero_points ? l.zero_point : 0;
  a.dst = l.dst;
  a.dst2 = l.dst2;
  a.src_cols = l.src_cols;
  a.col_offset = l.col_offset;
  return check(api_.enqueue(a, stream_), op);
}

Status RuntimeBackend::do_synchronize() {
  if (Status s = enter("synchronize"); !s) return s;
  return check(api_.stream_synchronize(stream_), "stream synchronize");
}

}  // namespace ballast::gpu
