// The validated center of every backend: GpuBackend's public methods.
#include "backend/live_ranges.hpp"

#include "base/hex.hpp"

#include <ballast/gpu_backend.hpp>
#include <ballast/log.hpp>

#include <iterator>
#include <limits>
#include <new>
#include <string>

namespace ballast {
namespace {

using detail::Access;
using detail::describe_range;

bool shares_a_byte(DevicePtr a, std::uint64_t an, DevicePtr b, std::uint64_t bn) {
  return an != 0 && bn != 0 && a < b + bn && b < a + an;
}

// ptr + offset, or an overflow error naming the operand.
Result<DevicePtr> offset_pointer(std::string_view operand, DevicePtr ptr, std::uint64_t offset) {
  if (offset > std::numeric_limits<DevicePtr>::max() - ptr)
    return make_error(ErrorCode::overflow,
                      std::string(operand) + " " + hex(ptr) + " + offset " + std::to_string(offset) + " wraps the address space");
  return ptr + offset;
}

bool is_power_of_two(std::uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Adds the operation to an error only: the success path builds no string.
template <class Doing>
Status in_context(Status s, const Doing& doing) {
  if (!s) return std::move(s).with_context(doing());
  return s;
}

}  // namespace

GpuBackend::GpuBackend() : live_(std::make_unique<detail::LiveRanges>()) {}
GpuBackend::~GpuBackend() = default;

Result<DevicePtr> GpuBackend::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  const auto doing = [&] { return info().backend + ": allocate " + std::to_string(bytes) + " bytes"; };
  if (!is_power_of_two(alignment))
    return make_error(ErrorCode::invalid_argument, "alignment " + std::to_string(alignment) + " is not a power of two")
        .with_context(doing());
  auto range = do_allocate(bytes, alignment);
  if (!range) return std::move(range.error()).with_context(doing());
  // What a backend hands back is checked here, once: the rest of the core
  // takes it as a device range it may offset into.
  std::string wrong;
  if (range->ptr == 0)
    wrong = "a null pointer";
  else if (bytes > std::numeric_limits<std::uint64_t>::max() - range->ptr)
    wrong = describe_range("allocation", range->ptr, bytes) + ", which wraps the address space";
  else if (range->ptr % alignment != 0)
    wrong = hex(range->ptr) + ", not a multiple of the alignment " + std::to_string(alignment);
  if (!wrong.empty()) {
    (void)do_free(*range, bytes);
    return make_error(ErrorCode::internal, "the backend returned " + wrong).with_context(doing());
  }
  bool recorded = false;
  try {
    recorded = live_->add_allocation(range->ptr, {bytes, range->cookie});
  } catch (const std::bad_alloc&) {
    (void)do_free(*range, bytes);
    return make_error(ErrorCode::out_of_memory, "no host memory to record the allocation").with_context(doing());
  }
  if (!recorded) {
    (void)do_free(*range, bytes);
    return make_error(ErrorCode::internal, "the backend returned " + describe_range("allocation", range->ptr, bytes) +
                                               ", which overlaps a live allocation")
        .with_context(doing());
  }
  return range->ptr;
}

Status GpuBackend::free(DevicePtr ptr) {
  auto node = live_->take_allocation(ptr);
  if (!node)
    return make_error(ErrorCode::invalid_argument,
                      hex(ptr) + " is not a live allocation (unknown, already freed, an interior pointer or a registration)")
        .with_context(info().backend + ": free");
  Status s = do_free({ptr, node.mapped().cookie}, node.mapped().bytes);
  if (!s) {
    live_->restore_allocation(std::move(node));
    return std::move(s).with_context(info().backend + ": free " + hex(ptr));
  }
  return s;
}

void GpuBackend::release_live_ranges() {
  // Registrations first: the newest of several on one start is ended first,
  // as unregister_host would.
  // Each range gets a second try: a backend reports an earlier
  // asynchronous error on the next call it takes, once (Vulkan's pending
  // validation message), and that call is refused though the range itself
  // could go; without the retry the range would leak at teardown. What the
  // first try said goes to the log, since no caller is left to return it
  // to. A backend whose error is sticky refuses both, and the range is lost
  // with the device.
  const auto twice = [&](auto&& call) {
    Status first = call();
    if (first.ok()) return;
    log_message(LogLevel::error, info().backend, "at teardown: " + first.error().to_string());
    if (Status again = call(); !again.ok())
      log_message(LogLevel::error, info().backend, "at teardown, again: " + again.error().to_string());
  };
  auto registrations = live_->take_all_registrations();
  for (auto it = registrations.rbegin(); it != registrations.rend(); ++it)
    twice([&] { return do_unregister_host({it->first, it->second.cookie}, it->second.bytes, it->second.access); });
  // (No structured binding here: clang 14 cannot capture one in a lambda.)
  for (const auto& entry : live_->take_all_allocations()) {
    const DevicePtr ptr = entry.first;
    const auto& a = entry.second;
    twice([&] { return do_free({ptr, a.cookie}, a.bytes); });
  }
}

AllocationCounters GpuBackend::counters() const { return live_->counters(); }

Status GpuBackend::copy_to_device(DevicePtr dst, std::uint64_t dst_offset, std::span<const std::byte> src) {
  const auto doing = [&] { return info().backend + ": copy " + std::to_string(src.size()) + " bytes host to device"; };
  auto to = offset_pointer("dst", dst, dst_offset);
  if (!to) return std::move(to.error()).with_context(doing());
  auto resolved = live_->resolve("dst", *to, src.size(), Access::write);
  if (!resolved) return std::move(resolved.error()).with_context(doing());
  if (src.empty()) return {};
  return in_context(do_copy_to_device(*resolved, src), doing);
}

Status GpuBackend::copy_to_host(std::span<std::byte> dst, DevicePtr src, std::uint64_t src_offset) {
  const auto doing = [&] { return info().backend + ": copy " + std::to_string(dst.size()) + " bytes device to host"; };
  auto from = offset_pointer("src", src, src_offset);
  if (!from) return std::move(from.error()).with_context(doing());
  auto resolved = live_->resolve("src", *from, dst.size(), Access::read);
  if (!resolved) return std::move(resolved.error()).with_context(doing());
  if (dst.empty()) return {};
  return in_context(do_copy_to_host(dst, *resolved), doing);
}

Status GpuBackend::copy_device(DevicePtr dst, std::uint64_t dst_offset, DevicePtr src, std::uint64_t src_offset,
                               std::uint64_t bytes) {
  const auto doing = [&] { return info().backend + ": copy " + std::to_string(bytes) + " bytes device to device"; };
  auto to = offset_pointer("dst", dst, dst_offset);
  if (!to) return std::move(to.error()).with_context(doing());
  auto from = offset_pointer("src", src, src_offset);
  if (!from) return std::move(from.error()).with_context(doing());
  auto source = live_->resolve("src", *from, bytes, Access::read);
  if (!source) return std::move(source.error()).with_context(doing());
  auto target = live_->resolve("dst", *to, bytes, Access::write);
  if (!target) return std::move(target.error()).with_context(doing());
  if (shares_a_byte(*to, bytes, *from, bytes))
    return make_error(ErrorCode::invalid_argument, describe_range("dst", *to, bytes) + " overlaps " +
                                                       describe_range("src", *from, bytes) +
                                                       "; a copy's source and destination must not overlap")
        .with_context(doing());
  if (bytes == 0) return {};
  return in_context(do_copy_device(*target, *source, bytes), doing);
}

Result<DevicePtr> GpuBackend::register_host(const void* host, std::uint64_t bytes, HostAccess access) {
  const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(host));
  const bool read_only = access == HostAccess::read_only;
  const std::string doing = info().backend + ": register " + detail::format_range(address, bytes) +
                            (read_only ? " read-only" : " read-write");
  if (host == nullptr || bytes == 0)
    return make_error(ErrorCode::invalid_argument, "a host registration must be non-null and non-empty").with_context(doing);
  if (bytes > std::numeric_limits<std::uint64_t>::max() - address)
    return make_error(ErrorCode::overflow, "the range wraps the address space").with_context(doing);
  const Capabilities& caps = capabilities();
  if (!caps.host_registration)
    return make_error(ErrorCode::unsupported, "this device cannot register host memory: " + caps.host_registration_note)
        .with_context(doing);
  if (read_only && !caps.read_only_registration)
    return make_error(ErrorCode::unsupported, "this device cannot register host memory read-only: " + caps.host_registration_note)
        .with_context(doing);
  auto range = do_register_host(host, bytes, access);
  if (!range) return std::move(range.error()).with_context(doing);
  if (range->ptr == 0 || bytes > std::numeric_limits<std::uint64_t>::max() - range->ptr) {
    (void)do_unregister_host(*range, bytes, access);
    return make_error(ErrorCode::internal,
                      "the backend returned " + (range->ptr == 0 ? std::string("a null pointer")
                                                                 : describe_range("registration", range->ptr, bytes) +
                                                                       ", which wraps the address space"))
        .with_context(doing);
  }
  try {
    live_->add_registration(range->ptr, {bytes, access, range->cookie});
  } catch (const std::bad_alloc&) {
    (void)do_unregister_host(*range, bytes, access);
    return make_error(ErrorCode::out_of_memory, "no host memory to record the registration").with_context(doing);
  }
  return range->ptr;
}

Status GpuBackend::unregister_host(DevicePtr ptr) {
  auto node = live_->take_registration(ptr);
  if (!node)
    return make_error(ErrorCode::invalid_argument, hex(ptr) + " is not a live host registration")
        .with_context(info().backend + ": unregister host memory");
  Status s = do_unregister_host({ptr, node.mapped().cookie}, node.mapped().bytes, node.mapped().access);
  if (!s) {
    live_->restore_registration(std::move(node));
    return std::move(s).with_context(info().backend + ": unregister host memory at " + hex(ptr));
  }
  return s;
}

Status GpuBackend::unregister_host(DevicePtr ptr, std::uint64_t bytes, HostAccess access) {
  detail::Registration made;
  made.bytes = bytes;
  made.access = access;
  auto node = live_->take_registration(ptr, &made);
  if (!node)
    return make_error(ErrorCode::invalid_argument, hex(ptr) + " is not a live " +
                                                       (access == HostAccess::read_only ? "read-only" : "read-write") +
                                                       " host registration of " + std::to_string(bytes) + " bytes")
        .with_context(info().backend + ": unregister host memory");
  Status s = do_unregister_host({ptr, node.mapped().cookie}, node.mapped().bytes, node.mapped().access);
  if (!s) {
    live_->restore_registration(std::move(node));
    return std::move(s).with_context(info().backend + ": unregister host memory at " + hex(ptr));
  }
  return s;
}

Status GpuBackend::launch(const DerivationLaunch& l) {
  const auto doing = [&] { return info().backend + ": launch " + std::string(derivation_name(l.kind)); };
  auto sizes = derivation_sizes(l);
  if (!sizes) return std::move(sizes.error()).with_context(doing());
  if (!capabilities().unaligned_operands)
    if (Status a = check_operand_alignment(l); !a) return std::move(a).with_context(doing());
  struct Operand {
    const char* name;
    DevicePtr ptr;
    std::uint64_t bytes;
    Access access;
  };
  const DerivationSizes& s = *sizes;
  const Operand operands[] = {
      {"src", l.src, s.src_bytes, Access::read},
      {"scales", l.scales, s.scales_bytes, Access::read},
      {"zero_point", l.zero_point, s.zero_point_bytes, Access::read},
      {"dst", l.dst, s.dst_bytes, Access::write},
      {"dst2", l.dst2, s.dst2_bytes, Access::write},
  };
  ResolvedOperand resolved[std::size(operands)];
  for (std::size_t i = 0; i < std::size(operands); ++i) {
    const Operand& o = operands[i];
    auto r = live_->resolve(o.name, o.ptr, o.bytes, o.access);
    if (!r) return std::move(r.error()).with_context(doing());
    resolved[i] = *r;
  }
  // Kernels read and write in parallel: an output sharing a byte with any
  // other operand would read what it is writing.
  for (const Operand& out : operands) {
    if (out.access != Access::write) continue;
    for (const Operand& other : operands) {
      if (&other == &out || (other.access == Access::write && &other > &out)) continue;
      if (shares_a_byte(out.ptr, out.bytes, other.ptr, other.bytes))
        return make_error(ErrorCode::invalid_argument, describe_range(out.name, out.ptr, out.bytes) + " overlaps " +
                                                           describe_range(other.name, other.ptr, other.bytes) +
                                                           "; outputs must not alias any operand")
            .with_context(doing());
    }
  }
  if (s.dst_bytes == 0 && s.dst2_bytes == 0) return {};
  const LaunchOperands resolved_operands{resolved[0], resolved[1], resolved[2], resolved[3], resolved[4]};
  return in_context(do_launch(l, s, resolved_operands), doing);
}

Status GpuBackend::synchronize() {
  return in_context(do_synchronize(), [&] { return info().backend + ": synchronize"; });
}

}  // namespace ballast
