#include "host_driver.hpp"

#include "host_kernels.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

namespace ballast::gpu::testing {
namespace {

struct State {
  std::mutex mutex;
  int devices = 1;
  bool read_only_registration = true;
  std::array<std::optional<NativeCode>, static_cast<int>(Op::count_)> fail{};
  std::array<int, static_cast<int>(Op::count_)> calls{};
  std::map<std::uint64_t, std::uint64_t> allocations;    // address -> bytes
  std::map<std::uint64_t, std::uint64_t> registrations;  // host address -> bytes

  // What is still allocated when the process ends goes with it, as a
  // driver's context does: a backend left unusable by a sticky error can
  // free nothing at teardown (the core's second try is refused too).
  ~State() {
    for (const auto& [address, bytes] : allocations) std::free(reinterpret_cast<void*>(address));
  }
};

State& state() {
  static State s;
  return s;
}

// Counts the call and returns the injected failure, if any.
NativeCode enter(Op op) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  ++s.calls[static_cast<int>(op)];
  auto& f = s.fail[static_cast<int>(op)];
  if (!f) return 0;
  const NativeCode c = *f;
  f.reset();
  return c;
}

// Device address -> host address: registrations live at host + shift.
std::uint64_t to_host(std::uint64_t device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (device >= kRegistrationShift) {
    const std::uint64_t host = device - kRegistrationShift;
    auto it = s.registrations.upper_bound(host);
    if (it != s.registrations.begin() && host < std::prev(it)->first + std::prev(it)->second) return host;
  }
  return device;
}

const char* error_name(NativeCode c) {
  switch (c) {
    case 0: return "hostSuccess";
    case kInvalidValue: return "hostErrorInvalidValue";
    case kOutOfMemory: return "hostErrorMemoryAllocation";
    case kNoDevice: return "hostErrorNoDevice";
    case kIllegalAddress: return "hostErrorIllegalAddress";
    case kAlreadyRegistered: return "hostErrorHostMemoryAlreadyRegistered";
    default: return "hostErrorUnknown";
  }
}

ErrorCode classify(NativeCode c) {
  switch (c) {
    case kOutOfMemory: return ErrorCode::out_of_memory;
    case kInvalidValue:
    case kAlreadyRegistered: return ErrorCode::invalid_argument;
    case kNoDevice: return ErrorCode::unavailable;
    default: return ErrorCode::device_error;
  }
}

bool is_sticky(NativeCode c) { return c == kIllegalAddress; }

std::string unavailable_reason(NativeCode c) { return std::string("no host device (") + error_name(c) + ")"; }

NativeCode device_count(int* count) {
  if (NativeCode c = enter(Op::device_count)) return c;
  *count = state().devices;
  return 0;
}

NativeCode device_info(int index, NativeDevice* out) {
  if (NativeCode c = enter(Op::device_info)) return c;
  if (index < 0 || index >= state().devices) return kInvalidValue;
  out->name = "host device " + std::to_string(index);
  for (std::size_t i = 0; i < out->uuid.size(); ++i) out->uuid[i] = static_cast<std::uint8_t>(16 * index + i);
  out->total_memory = std::uint64_t{1} << 30;
  out->driver = "host driver 1.0";
  out->can_map_host_memory = true;
  out->read_only_registration = state().read_only_registration;
  return 0;
}

NativeCode set_device(int index) {
  if (NativeCode c = enter(Op::set_device)) return c;
  return index >= 0 && index < state().devices ? 0 : kInvalidValue;
}

NativeCode device_malloc(std::uint64_t* ptr, std::uint64_t bytes) {
  if (NativeCode c = enter(Op::malloc)) return c;
  if (bytes > (std::uint64_t{1} << 30)) return kOutOfMemory;
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return kOutOfMemory;
  *ptr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(state().mutex);
  state().allocations[*ptr] = bytes;
  return 0;
}

NativeCode device_free(std::uint64_t ptr) {
  if (NativeCode c = enter(Op::free)) return c;
  std::lock_guard lock(state().mutex);
  if (state().allocations.erase(ptr) == 0) return kInvalidValue;
  std::free(reinterpret_cast<void*>(ptr));
  return 0;
}

NativeCode stream_create(void** stream) {
  if (NativeCode c = enter(Op::stream_create)) return c;
  static int token;
  *stream = &token;
  return 0;
}

NativeCode stream_destroy(void*) { return 0; }

NativeCode stream_synchronize(void*) { return enter(Op::stream_synchronize); }

NativeCode copy_async(void* dst, const void* src, std::uint64_t bytes, CopyKind kind, void*) {
  if (NativeCode c = enter(Op::copy)) return c;
  void* d = kind == CopyKind::device_to_host ? dst : reinterpret_cast<void*>(to_host(reinterpret_cast<std::uintptr_t>(dst)));
  const void* s =
      kind == CopyKind::host_to_device ? src : reinterpret_cast<const void*>(to_host(reinterpret_cast<std::uintptr_t>(src)));
  std::memcpy(d, s, bytes);
  return 0;
}

NativeCode host_register(const void* host, std::uint64_t bytes, bool) {
  if (NativeCode c = enter(Op::host_register)) return c;
  std::lock_guard lock(state().mutex);
  auto& regs = state().registrations;
  const auto address = reinterpret_cast<std::uintptr_t>(host);
  auto next = regs.lower_bound(address);
  if (next != regs.end() && next->first < address + bytes) return kAlreadyRegistered;
  if (next != regs.begin() && std::prev(next)->first + std::prev(next)->second > address) return kAlreadyRegistered;
  regs[address] = bytes;
  return 0;
}

NativeCode host_unregister(const void* host) {
  if (NativeCode c = enter(Op::host_unregister)) return c;
  std::lock_guard lock(state().mutex);
  return state().registrations.erase(reinterpret_cast<std::uintptr_t>(host)) == 1 ? 0 : kInvalidValue;
}

NativeCode host_device_pointer(std::uint64_t* device, const void* host) {
  if (NativeCode c = enter(Op::host_device_pointer)) return c;
  std::lock_guard lock(state().mutex);
  const auto address = reinterpret_cast<std::uintptr_t>(host);
  if (state().registrations.count(address) == 0) return kInvalidValue;
  *device = address + kRegistrationShift;
  return 0;
}

int enqueue(const KernelArgs& args, void*) {
  if (NativeCode c = enter(Op::enqueue)) return c;
  KernelArgs a = args;
  for (std::uint64_t* p : {&a.src, &a.scales, &a.zero_point, &a.dst, &a.dst2}) *p = to_host(*p);
  run_on_host(a);
  return 0;
}

RuntimeApi make_api() {
  RuntimeApi api;
  api.backend = "host";
  api.import_alignment = 64;
  api.registration_note = "the host device was told not to support read-only registration";
  BALLAST_RUNTIME_API_BIND(api)
  return api;
}

}  // namespace

const RuntimeApi& HostDriver::api() {
  static const RuntimeApi api = make_api();
  return api;
}

void HostDriver::reset(int devices, bool read_only_registration) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.devices = devices;
  s.read_only_registration = read_only_registration;
  s.fail.fill(std::nullopt);
  s.calls.fill(0);
}

void HostDriver::fail_next(Op op, NativeCode code) {
  std::lock_guard lock(state().mutex);
  state().fail[static_cast<int>(op)] = code;
}

int HostDriver::calls(Op op) {
  std::lock_guard lock(state().mutex);
  return state().calls[static_cast<int>(op)];
}

std::size_t HostDriver::live_allocations() {
  std::lock_guard lock(state().mutex);
  return state().allocations.size();
}

std::size_t HostDriver::live_registrations() {
  std::lock_guard lock(state().mutex);
  return state().registrations.size();
}

}  // namespace ballast::gpu::testing
