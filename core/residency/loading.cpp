// Paged and uploaded residency's device work: reserving budget (evicting
// under the policy in eviction.hpp), copying a source weight straight from
// its mapping, and building a derived value from pinned operands.
#include "residency/impl.hpp"

#include "derive/build.hpp"
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

Result<Residency::Impl::Blocks> Residency::Impl::obtain(std::span<const std::uint64_t> sizes, const std::string& what,
                                                        const std::string& allocating, Requester who,
                                                        std::uint64_t own_operands) {
  Blocks out;
  bool pooled[2] = {false, false};
  std::uint64_t total = 0;
  for (std::uint64_t s : sizes) total += s;
  std::uint64_t missing = 0;  // bytes of the blocks the pool did not have
  {
    std::unique_lock lock(mutex);
    // A pooled block is already counted as held: taking it needs no room.
    auto take_pooled = [&] {
      missing = 0;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        if (!pooled[i])
          if (auto b = pool.take(sizes[i], residency::kBlockAlignment)) {
            out.ptr[i] = b->ptr;
            pooled[i] = true;
          }
        if (!pooled[i]) missing += sizes[i];
      }
    };
    // The refusal: the pooled blocks this took go back (still held), and
    // the message says what holds the budget.
    const auto refuse = [&] {
      for (std::size_t i = 0; i < sizes.size(); ++i)
        if (pooled[i]) pool_locked(out.ptr[i], sizes[i]);
      // Pinned counts every pin, this build's own operands among them: say
      // how much of it this request holds, so an engine knows what it can
      // release.
      std::string message = "budget of " + bytes_text(budget) + " cannot take " + bytes_text(total) + " for " + what +
                            ": " + bytes_text(pinned) + " pinned";
      if (own_operands != 0) message += " (" + bytes_text(own_operands) + " of them this build's own operands)";
      message += ", " + bytes_text(held) + " held in all";
      if (const std::uint64_t s = stuck_bytes(); s != 0)
        message += " (" + bytes_text(s) + " of them frees the device refused)";
      if (who == Requester::prefetch) message += " (a prefetch evicts nothing in use or prefetched)";
      return make_error(ErrorCode::out_of_memory, std::move(message));
    };
    take_pooled();
    // A request that cannot fit beside the pins fails before anything is
    // evicted for it: a single request never waits for a pin to go, so
    // evicting the unpinned entries first would only empty the device for
    // nothing. Not while prefetches are in flight: a demand request waits
    // for them (below), and their builds' own pins then go.
    if (prefetch_loads == 0 && (pinned > budget || missing > budget - pinned)) return refuse();
    while (missing > budget || held > budget - missing) {
      // Room from the pool before any entry goes: a pooled block is dead
      // weight for a request of another size.
      if (release_pooled_locked()) continue;
      Entry* victim = eviction.choose(clock, who, missing);
      if (victim == nullptr && who == Requester::demand && prefetch_loads > 0 && missing <= budget) {
        // Room held by prefetches in flight: they never wait, so they end
        // soon, and a best-effort prefetch must not fail an engine's pin.
        changed.wait(lock);
        take_pooled();
        continue;
      }
      // Frees the backend refused once may go through now: last, since
      // each retry is a backend call that failed before.
      if (victim == nullptr && retry_stuck_locked()) continue;
      if (victim == nullptr) return refuse();
      evict_locked(*victim);  // its blocks go to the pool: one may be what this needs
      take_pooled();
    }
    held += missing;
    peak = std::max(peak, held);
    for (std::size_t i = 0; i < sizes.size(); ++i) ++(pooled[i] ? counters.pool_hits : counters.pool_misses);
  }
  // The rest from the backend, outside the lock. On a failure (or host
  // memory running out meanwhile) the blocks obtained go to the pool and
  // the rest is no longer held.
  const auto give_back = [&](std::size_t failed) noexcept {
    std::lock_guard lock(mutex);
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      if (pooled[j] || j < failed)
        pool_locked(out.ptr[j], sizes[j]);  // obtained: kept for the next caller
      else
        held -= std::min(held, sizes[j]);  // never allocated: no longer held
    }
  };
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (pooled[i]) continue;
    Result<DevicePtr> ptr = DevicePtr{0};
    try {
      ptr = allocate(sizes[i], who);
    } catch (const std::bad_alloc&) {
      give_back(i);
      throw;
    }
    if (!ptr.ok()) {
      give_back(i);
      return std::move(ptr.error()).with_context(allocating);
    }
    out.ptr[i] = *ptr;
  }
  return out;
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

bool Residency::Impl::retry_stuck_locked() noexcept {
  bool freed = false;
  for (std::size_t i = 0; i < stuck.size();) {
    if (gpu.free(stuck[i].ptr).ok()) {
      held -= std::min(held, stuck[i].bytes);
      stuck[i] = stuck.back();
      stuck.pop_back();
      freed = true;
    } else {
      ++i;
    }
  }
  return freed;
}

void Residency::Impl::pool_locked(DevicePtr ptr, std::uint64_t bytes) noexcept {
  if (ptr == 0) return;
  try {
    pool.put({ptr, bytes, residency::kBlockAlignment});
  } catch (...) {
    free_locked(ptr, bytes);  // no room to remember it: give it back now
  }
}

bool Residency::Impl::release_pooled_locked() noexcept {
  auto b = pool.take_oldest();
  if (!b) return false;
  ++counters.pool_releases;
  free_locked(b->ptr, b->bytes);
  return true;
}

void Residency::Impl::evict_locked(Entry& e) noexcept {
  pool_locked(e.first, e.first_bytes);
  pool_locked(e.second, e.second_bytes);
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
    auto ptr = gpu.allocate(bytes, residency::kBlockAlignment);
    if (ptr.ok() || ptr.error().code != ErrorCode::out_of_memory) return ptr;
    // The device is fuller than the budget says (another model, another
    // process): give back the pool, then what the policy allows, and try
    // again.
    std::lock_guard lock(mutex);
    if (release_pooled_locked()) continue;
    Entry* victim = eviction.choose(clock, who, bytes);
    if (victim == nullptr && retry_stuck_locked()) continue;
    if (victim == nullptr) return ptr;
    evict_locked(*victim);  // into the pool, and out of it at once: the device needs the memory
    while (release_pooled_locked()) {
    }
  }
}

Result<Residency::Impl::Loaded> Residency::Impl::page_in(const Entry& e, Requester who) {
  BALLAST_ASSIGN_OR_RETURN(const WeightRef* found, weight_ref(e.weight));
  const WeightRef& ref = *found;
  const std::uint64_t length = e.first_bytes;
  const PagingTimer timer(paging_ns);
  const std::uint64_t sizes[] = {length};
  // Said as the strategy does it: an upload entry is copied in once.
  const std::string doing = (e.evictable ? "paging in " : "uploading ") + e.name;
  BALLAST_ASSIGN_OR_RETURN(Blocks blocks, obtain(sizes, e.name, doing, who));
  const DevicePtr ptr = blocks.ptr[0];
  Status copied;
  if (length != 0) {
    // The backend reads the mapping itself: no host copy in between. The
    // span is checked to be the store's own bytes, so a copy would show in
    // host_copy_bytes rather than go unnoticed.
    // Host memory running out here fails the copy: the block is held and
    // must go back (below), not leak with the exception.
    try {
      const auto own = store.bytes(ref);
      copied = store.transfer(ref, 0, length, [&](Bytes bytes) -> Status {
        if (!own || bytes.data() != own->data()) host_copies += bytes.size();
        return gpu.copy_to_device(ptr, 0, bytes);
      });
    } catch (const std::bad_alloc&) {
      copied = residency::out_of_host_memory();
    }
  }
  if (!copied.ok()) {
    // The block is sound (the copy into it failed): the next value of its
    // size takes it.
    {
      std::lock_guard lock(mutex);
      pool_locked(ptr, length);
    }
    return std::move(copied).with_context(doing);
  }
  return Loaded{ptr, 0};
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
  // Output blocks from the budget (the pool, eviction); a failure hands
  // them back, freed, so nothing half-built stays held.
  class Budgeted final : public derive::OutputBlocks {
   public:
    Budgeted(Impl& m, const Entry& e, Requester who, std::uint64_t operands)
        : m_(m), e_(e), who_(who), operands_(operands) {}
    Status obtain(DerivationLaunch& l, const DerivationSizes&) override {
      const std::uint64_t sizes[] = {e_.first_bytes, e_.second_bytes};
      const bool pair = e_.second_bytes != 0 || derivation_yields_pair(l.kind);
      BALLAST_ASSIGN_OR_RETURN(
          Blocks b, m_.obtain(std::span(sizes, pair ? 2 : 1), e_.name, "allocating " + e_.name, who_, operands_));
      l.dst = b.ptr[0];
      l.dst2 = b.ptr[1];
      return Status();
    }
    Status give_back(DerivationLaunch& l, const DerivationSizes&, Status failure) override {
      m_.discard(l.dst, e_.first_bytes);
      if (l.dst2 != 0) m_.discard(l.dst2, e_.second_bytes);
      l.dst = l.dst2 = 0;
      return std::move(failure).with_context("building " + e_.name);
    }

   private:
    Impl& m_;
    const Entry& e_;
    Requester who_;
    std::uint64_t operands_;
  } blocks(*this, e, who, source.bytes() + scales.bytes() + zero_points.bytes());
  const DerivationSizes sizes{.dst_bytes = e.first_bytes, .dst2_bytes = e.second_bytes};
  // The kernel read zero-copy operands from their files' pages: a
  // truncation meanwhile made it read zeros (the registration is armed),
  // and resolving again re-checks the file and the guard's poison.
  Status built;
  try {
    built = derive::build_one(gpu, l, sizes, blocks, [&] {
      for (const std::optional<ValueId>& id : source_operands(p))
        if (id && strategy_of(*id) == ResidencyStrategy::zero_copy)
          if (auto again = registrations->resolve(*id); !again.ok()) return again.status();
      return Status();
    });
  } catch (const std::bad_alloc&) {
    // Only where no kernel is in flight (the launch and the wait allocate
    // nothing that throws): the output blocks still held go back.
    if (l.dst != 0) discard(l.dst, e.first_bytes);
    if (l.dst2 != 0) discard(l.dst2, e.second_bytes);
    return residency::out_of_host_memory();
  }
  BALLAST_RETURN_IF_ERROR(built);
  return Loaded{l.dst, l.dst2};
}

}  // namespace ballast
