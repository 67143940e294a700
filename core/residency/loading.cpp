// Paged and uploaded residency's device work: reserving budget (evicting
// under the policy in eviction.hpp), copying a source weight straight from
// its mapping, and building a derived value from pinned operands.
#include "residency/impl.hpp"

#include "derive/transposed_source.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>

namespace ballast {

using residency::Entry;
using residency::Requester;
using residency::bytes_text;

namespace {

// Adds the time from construction to destruction to `total`: the time a
// page-in or a build itself takes (a build's operand page-ins are timed by
// their own page-ins, not twice).
class PagingTimer {
 public:
  explicit PagingTimer(std::atomic<std::uint64_t>& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~PagingTimer() {
    total_ += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count());
  }
  PagingTimer(const PagingTimer&) = delete;
  PagingTimer& operator=(const PagingTimer&) = delete;

 private:
  std::atomic<std::uint64_t>& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

Status Residency::Impl::reserve(std::uint64_t bytes, const std::string& what, Requester who) {
  std::unique_lock lock(mutex);
  while (bytes > budget || held > budget - bytes) {
    Entry* victim = eviction.choose(clock, who, bytes);
    if (victim == nullptr && who == Requester::demand && prefetch_loads > 0 && bytes <= budget) {
      // Room held by prefetches in flight: they never wait, so they end
      // soon, and a best-effort prefetch must not fail an engine's pin.
      changed.wait(lock);
      continue;
    }
    if (victim == nullptr) {
      std::string message = "budget of " + bytes_text(budget) + " cannot take " + bytes_text(bytes) + " for " + what +
                            ": " + bytes_text(pinned) + " pinned, " + bytes_text(held) + " held in all";
      if (who == Requester::prefetch) message += " (a prefetch evicts nothing in use or prefetched)";
      return make_error(ErrorCode::out_of_memory, std::move(message));
    }
    evict_locked(*victim);
  }
  held += bytes;
  peak = std::max(peak, held);
  return Status();
}

void Residency::Impl::unreserve(std::uint64_t bytes) noexcept {
  std::lock_guard lock(mutex);
  held -= std::min(held, bytes);
}

void Residency::Impl::free_locked(DevicePtr ptr, std::uint64_t bytes) noexcept {
  if (ptr == 0) return;
  Status s = gpu.free(ptr);
  if (s.ok()) {
    held -= std::min(held, bytes);
  } else {
    // Still live on the device: it stays counted against the budget.
    try {
      stuck.push_back({ptr, bytes});
    } catch (...) {
    }
  }
}

void Residency::Impl::evict_locked(Entry& e) noexcept {
  free_locked(e.first, e.first_bytes);
  free_locked(e.second, e.second_bytes);
  e.first = e.second = 0;
  e.state = Entry::State::absent;
  e.awaiting_use = false;
  eviction.erase(e);
  ++(e.derived ? counters.derived_evictions : counters.source_evictions);
}

void Residency::Impl::discard(DevicePtr ptr, std::uint64_t bytes) noexcept {
  std::lock_guard lock(mutex);
  free_locked(ptr, bytes);
}

Result<DevicePtr> Residency::Impl::allocate(std::uint64_t bytes, Requester who) {
  for (;;) {
    auto ptr = gpu.allocate(bytes);
    if (ptr.ok() || ptr.error().code != ErrorCode::out_of_memory) return ptr;
    // The device is fuller than the budget says (another model, another
    // process): give back what the policy allows and try again.
    std::lock_guard lock(mutex);
    Entry* victim = eviction.choose(clock, who, bytes);
    if (victim == nullptr) return ptr;
    evict_locked(*victim);
  }
}

Result<Residency::Impl::Loaded> Residency::Impl::page_in(const Entry& e, Requester who) {
  BALLAST_ASSIGN_OR_RETURN(const WeightRef* found, weight_ref(e.weight));
  const WeightRef& ref = *found;
  const std::uint64_t length = e.first_bytes;
  const PagingTimer timer(paging_ns);
  BALLAST_RETURN_IF_ERROR(reserve(length, e.name, who));
  auto ptr = allocate(length, who);
  if (!ptr.ok()) {
    unreserve(length);
    return std::move(ptr.error()).with_context("paging in " + e.name);
  }
  Status copied;
  if (length != 0) {
    // The backend reads the mapping itself: no host copy in between. The
    // span is checked to be the store's own bytes, so a copy would show in
    // host_copy_bytes rather than go unnoticed.
    const auto own = store.bytes(ref);
    copied = store.transfer(ref, 0, length, [&](Bytes bytes) -> Status {
      if (!own || bytes.data() != own->data()) host_copies += bytes.size();
      return gpu.copy_to_device(*ptr, 0, bytes);
    });
  }
  if (!copied.ok()) {
    discard(*ptr, length);
    return std::move(copied).with_context("paging in " + e.name);
  }
  return Loaded{*ptr, 0};
}

Result<Residency::Impl::Loaded> Residency::Impl::build(const Entry& e, Requester who) {
  const PlannedDerivation& p = *e.plan;
  const Use use = who == Requester::prefetch ? Use::prefetch_dependency : Use::dependency;
  DerivationLaunch l = p.launch;
  // Operands stay pinned until the kernel has completed (end of scope).
  Pinned source, scales, zero_points;
  if (p.of_transposed) {
    BALLAST_ASSIGN_OR_RETURN(source, pin_derived(transposed_source_of(p), use));
  } else {
    BALLAST_ASSIGN_OR_RETURN(source, pin_source(p.source, use));
  }
  l.src = source.first();
  if (p.scales) {
    BALLAST_ASSIGN_OR_RETURN(scales, pin_source(*p.scales, use));
    l.scales = scales.first();
  }
  if (p.zero_points) {
    BALLAST_ASSIGN_OR_RETURN(zero_points, pin_source(*p.zero_points, use));
    l.zero_point = zero_points.first();
  }
  const PagingTimer timer(paging_ns);
  BALLAST_RETURN_IF_ERROR(reserve(e.bytes(), e.name, who));
  auto first = allocate(e.first_bytes, who);
  if (!first.ok()) {
    unreserve(e.bytes());
    return std::move(first.error()).with_context("allocating " + e.name);
  }
  l.dst = *first;
  if (e.second_bytes != 0 || derivation_yields_pair(p.kind())) {
    auto second = allocate(e.second_bytes, who);
    if (!second.ok()) {
      discard(*first, e.first_bytes);
      unreserve(e.second_bytes);
      return std::move(second.error()).with_context("allocating " + e.name);
    }
    l.dst2 = *second;
  }
  Status s = gpu.launch(l);
  // Wait: an asynchronous kernel failure must never leave a resident value.
  if (s.ok()) s = gpu.synchronize();
  // The kernel read zero-copy operands from their files' pages: a
  // truncation meanwhile made it read zeros (the registration is armed),
  // and resolving again re-checks the file and the guard's poison.
  for (const std::optional<ValueId>& id : source_operands(p))
    if (s.ok() && id && strategy_of(*id) == ResidencyStrategy::zero_copy)
      if (auto again = registrations->resolve(*id); !again.ok()) s = again.status();
  if (!s.ok()) {
    discard(l.dst, e.first_bytes);
    if (l.dst2 != 0) discard(l.dst2, e.second_bytes);
    return std::move(s).with_context("building " + e.name);
  }
  return Loaded{l.dst, l.dst2};
}

}  // namespace ballast
