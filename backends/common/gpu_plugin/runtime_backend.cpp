#include "gpu_plugin/runtime_backend.hpp"

#include <ballast/dtype.hpp>

#include <cstdio>
#include <string>
#include <utility>

namespace ballast::gpu {
namespace {

static_assert(static_cast<int>(KernelKind::quant_int8) == static_cast<int>(Derivation::quant_int8));
static_assert(static_cast<int>(KernelKind::repack_int4) == static_cast<int>(Derivation::repack_int4));
static_assert(static_cast<int>(KernelType::bfloat16) == static_cast<int>(DataType::bfloat16));
static_assert(static_cast<int>(KernelType::float16) == static_cast<int>(DataType::float16));
static_assert(static_cast<int>(KernelZeroPoints::unpacked) == static_cast<int>(ZeroPoints::unpacked));

bool add_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t& out) { return __builtin_add_overflow(a, b, &out); }

void* as_pointer(std::uint64_t address) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(address)); }

std::string hex(std::uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Ranges [a, a+an) and [b, b+bn) share a byte.
bool overlap(std::uint64_t a, std::uint64_t an, std::uint64_t b, std::uint64_t bn) {
  return an != 0 && bn != 0 && a < b + bn && b < a + an;
}

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

Error native_error(const DriverApi& api, NativeCode code, std::string_view operation) {
  const char* name = api.error_name(code);
  Error e = make_error(api.classify(code), std::string(operation) + " failed: " + name);
  e.native = name;
  return e;
}

Result<std::unique_ptr<GpuBackend>> RuntimeBackend::open(const DriverApi& api, int index) {
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
  return std::unique_ptr<GpuBackend>(new RuntimeBackend(api, index, stream, std::move(info), std::move(caps)));
}

RuntimeBackend::RuntimeBackend(const DriverApi& api, int index, void* stream, DeviceInfo info, Capabilities caps)
    : api_(api), index_(index), stream_(stream), info_(std::move(info)), caps_(std::move(caps)) {}

RuntimeBackend::~RuntimeBackend() {
  // Best effort: a destructor has nobody to report to, and the counters
  // already told the owner about anything it leaked.
  api_.set_device(index_);
  api_.stream_synchronize(stream_);
  for (const DeviceRange& r : ranges_.all()) {
    if (r.kind == RangeKind::allocation) api_.free(r.driver_base);
  }
  for (const Pinned& p : pinned_) api_.host_unregister(p.host);
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
  if (bytes == 0) return {};
  if (Status s = check(api_.copy_async(dst, src, bytes, kind, stream_), operation); !s) return s;
  // Host spans belong to the caller once we return, so host transfers finish here.
  if (wait) return check(api_.stream_synchronize(stream_), std::string(operation) + " (waiting for the stream)");
  return {};
}

Result<DevicePtr> RuntimeBackend::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return make_error(ErrorCode::invalid_argument, "allocate: alignment " + std::to_string(alignment) + " is not a power of two");
  // The runtime aligns to at least 256 bytes; stricter alignment over-allocates.
  std::uint64_t request = bytes == 0 ? 1 : bytes;
  if (alignment > 256 && add_overflows(request, alignment - 1, request))
    return make_error(ErrorCode::overflow, "allocate: " + std::to_string(bytes) + " bytes plus alignment overflows");
  const std::string op = "allocate " + std::to_string(bytes) + " bytes";
  if (Status s = enter(op); !s) return s;
  std::lock_guard lock(mutex_);
  DevicePtr base = 0;
  if (NativeCode c = api_.malloc(&base, request); c != kNativeSuccess) {
    Error e = native_error(api_, c, op);
    if (api_.is_sticky(c) && !sticky_) sticky_ = e;
    return e;
  }
  const DevicePtr start = (base + alignment - 1) & ~(alignment - 1);
  if (!ranges_.add({start, bytes, RangeKind::allocation, false, base, nullptr})) {
    api_.free(base);
    return make_error(ErrorCode::internal, op + ": the driver returned " + hex(base) + ", which overlaps a live range");
  }
  return start;
}

Status RuntimeBackend::free(DevicePtr ptr) {
  std::optional<DeviceRange> r;
  {
    std::lock_guard lock(mutex_);
    r = ranges_.take(ptr, RangeKind::allocation);
  }
  if (!r)
    return make_error(ErrorCode::invalid_argument,
                      "free: " + hex(ptr) + " is not a live allocation of this backend (unknown, already freed, or a registration)");
  if (Status s = enter("free " + hex(ptr)); !s) return s;
  return check(api_.free(r->driver_base), "free " + hex(ptr));
}

AllocationCounters RuntimeBackend::counters() const {
  std::lock_guard lock(mutex_);
  return ranges_.counters();
}

Status RuntimeBackend::copy_to_device(DevicePtr dst, std::uint64_t dst_offset, std::span<const std::byte> src) {
  DevicePtr at = 0;
  if (add_overflows(dst, dst_offset, at)) return make_error(ErrorCode::overflow, "copy_to_device: destination + offset overflows");
  {
    std::lock_guard lock(mutex_);
    if (auto r = ranges_.resolve(at, src.size(), Access::write, "copy_to_device destination"); !r) return r.status();
  }
  if (Status s = enter("copy_to_device"); !s) return s;
  return copy(as_pointer(at), src.data(), src.size(), CopyKind::host_to_device, true,
              "copy " + std::to_string(src.size()) + " bytes host to device");
}

Status RuntimeBackend::copy_to_host(std::span<std::byte> dst, DevicePtr src, std::uint64_t src_offset) {
  DevicePtr at = 0;
  if (add_overflows(src, src_offset, at)) return make_error(ErrorCode::overflow, "copy_to_host: source + offset overflows");
  {
    std::lock_guard lock(mutex_);
    if (auto r = ranges_.resolve(at, dst.size(), Access::read, "copy_to_host source"); !r) return r.status();
  }
  if (Status s = enter("copy_to_host"); !s) return s;
  return copy(dst.data(), as_pointer(at), dst.size(), CopyKind::device_to_host, true,
              "copy " + std::to_string(dst.size()) + " bytes device to host");
}

Status RuntimeBackend::copy_device(DevicePtr dst, std::uint64_t dst_offset, DevicePtr src, std::uint64_t src_offset,
                                   std::uint64_t bytes) {
  DevicePtr to = 0, from = 0;
  if (add_overflows(dst, dst_offset, to) || add_overflows(src, src_offset, from))
    return make_error(ErrorCode::overflow, "copy_device: pointer + offset overflows");
  {
    std::lock_guard lock(mutex_);
    if (auto r = ranges_.resolve(to, bytes, Access::write, "copy_device destination"); !r) return r.status();
    if (auto r = ranges_.resolve(from, bytes, Access::read, "copy_device source"); !r) return r.status();
  }
  if (overlap(to, bytes, from, bytes))
    return make_error(ErrorCode::invalid_argument, "copy_device: source and destination overlap");
  if (Status s = enter("copy_device"); !s) return s;
  return copy(as_pointer(to), as_pointer(from), bytes, CopyKind::device_to_device, false,
              "copy " + std::to_string(bytes) + " bytes device to device");
}

Result<DevicePtr> RuntimeBackend::register_host(const void* host, std::uint64_t bytes, HostAccess access) {
  if (host == nullptr || bytes == 0)
    return make_error(ErrorCode::invalid_argument, "register_host: the range must be non-null and non-empty");
  if (!caps_.host_registration)
    return make_error(ErrorCode::unsupported, std::string("register_host: ") + caps_.host_registration_note);
  const bool read_only = access == HostAccess::read_only;
  if (read_only && !caps_.read_only_registration)
    return make_error(ErrorCode::unsupported, std::string("register_host read-only: ") + caps_.host_registration_note);
  const std::uint64_t a = caps_.import_alignment;
  const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(host));
  std::uint64_t end = 0;
  if (add_overflows(address, bytes, end) || add_overflows(end, a - 1, end))
    return make_error(ErrorCode::overflow, "register_host: range end overflows");
  const std::uint64_t base = address & ~(a - 1);
  end &= ~(a - 1);
  const std::string op = "register " + std::to_string(bytes) + " host bytes at " + hex(address) +
                         (read_only ? " read-only" : " read-write");
  if (Status s = enter(op); !s) return s;

  std::lock_guard lock(mutex_);
  Pinned* pin = nullptr;
  for (Pinned& p : pinned_) {
    const auto p_base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p.host));
    if (p_base <= base && end <= p_base + p.bytes && (read_only || !p.read_only)) pin = &p;
  }
  if (pin == nullptr) {
    Pinned fresh;
    fresh.host = as_pointer(base);
    fresh.bytes = end - base;
    fresh.read_only = read_only;
    if (NativeCode c = api_.host_register(fresh.host, fresh.bytes, read_only); c != kNativeSuccess)
      return native_error(api_, c, op);
    if (NativeCode c = api_.host_device_pointer(&fresh.device, fresh.host); c != kNativeSuccess) {
      api_.host_unregister(fresh.host);
      return native_error(api_, c, op + " (device pointer)");
    }
    pinned_.push_back(fresh);
    pin = &pinned_.back();
  }
  const auto pin_base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(pin->host));
  const DevicePtr device = pin->device + (address - pin_base);
  ++pin->users;
  ranges_.add({device, bytes, RangeKind::registration, read_only, pin->device, pin->host});
  return device;
}

Status RuntimeBackend::unregister_host(DevicePtr ptr) {
  const std::string op = "unregister host range at " + hex(ptr);
  const void* release = nullptr;
  {
    std::lock_guard lock(mutex_);
    std::optional<DeviceRange> r = ranges_.take(ptr, RangeKind::registration);
    if (!r)
      return make_error(ErrorCode::invalid_argument, "unregister_host: " + hex(ptr) + " is not a live registration of this backend");
    for (auto it = pinned_.begin(); it != pinned_.end(); ++it) {
      if (it->host != r->host || it->device != r->driver_base) continue;
      if (--it->users == 0) {
        release = it->host;
        pinned_.erase(it);
      }
      break;
    }
  }
  if (release == nullptr) return {};  // other handles still use the pinned pages
  if (Status s = enter(op); !s) return s;
  // Kernels still queued may read the range: let them finish first.
  const Status drained = check(api_.stream_synchronize(stream_), op + " (waiting for the stream)");
  const Status released = check(api_.host_unregister(release), op);
  return drained.ok() ? released : drained;
}

Status RuntimeBackend::launch(const DerivationLaunch& l) {
  const std::string op = "launch " + std::string(derivation_name(l.kind));
  auto sizes = derivation_sizes(l);
  if (!sizes) return std::move(sizes.error().with_context(op));
  if (Status a = check_operand_alignment(l); !a.ok()) return std::move(a).with_context(op);
  const DerivationSizes& s = *sizes;
  const bool zero_points = l.zero_points != ZeroPoints::absent;
  const bool int4 = l.kind == Derivation::dequant_int4 || l.kind == Derivation::repack_int4;
  {
    std::lock_guard lock(mutex_);
    struct Operand {
      DevicePtr ptr;
      std::uint64_t bytes;
      Access access;
      const char* name;
    };
    const Operand operands[] = {
        {l.src, s.src_bytes, Access::read, "src"},
        {l.scales, int4 ? s.scales_bytes : 0, Access::read, "scales"},
        {l.zero_point, int4 && zero_points ? s.zero_point_bytes : 0, Access::read, "zero_point"},
        {l.dst, s.dst_bytes, Access::write, "dst"},
        {l.dst2, s.dst2_bytes, Access::write, "dst2"},
    };
    for (const Operand& o : operands) {
      if (o.bytes == 0) continue;
      if (auto r = ranges_.resolve(o.ptr, o.bytes, o.access, o.name); !r) return std::move(r.error().with_context(op));
    }
    // Outputs must not alias any other operand: the kernels read and write in parallel.
    for (const int out : {3, 4}) {
      for (int i = 0; i < 5; ++i) {
        const Operand& o = operands[out];
        if (i != out && overlap(o.ptr, o.bytes, operands[i].ptr, operands[i].bytes))
          return make_error(ErrorCode::invalid_argument, op + ": " + o.name + " overlaps " + operands[i].name);
      }
    }
  }
  if (s.dst_bytes == 0 && s.dst2_bytes == 0) return {};
  if (Status st = enter(op); !st) return st;

  KernelArgs a;
  a.kind = static_cast<KernelKind>(l.kind);
  a.src_type = static_cast<KernelType>(l.src_type);
  a.element_bytes = dtype_bits(l.src_type) / 8;
  a.block_size = l.block_size;
  a.zero_points = static_cast<KernelZeroPoints>(l.zero_points);
  a.rows = l.rows;
  a.cols = l.cols;
  a.src = l.src;
  a.scales = int4 ? l.scales : 0;
  a.zero_point = int4 && zero_points ? l.zero_point : 0;
  a.dst = l.dst;
  a.dst2 = l.dst2;
  return check(api_.enqueue(a, stream_), op);
}

Status RuntimeBackend::synchronize() {
  if (Status s = enter("synchronize"); !s) return s;
  return check(api_.stream_synchronize(stream_), "synchronize");
}

}  // namespace ballast::gpu
