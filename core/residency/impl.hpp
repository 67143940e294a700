// Residency's state, shared by the files that implement it: residency.cpp
// (the public methods, pins, stats, release) and loading.cpp (budget
// reservations, eviction, page-ins and derivation builds).
#pragma once

#include <ballast/residency.hpp>

#include "derive/identity.hpp"
#include "residency/block_pool.hpp"
#include "residency/entry.hpp"
#include "residency/eviction.hpp"
#include "residency/prefetcher.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ballast {

namespace residency {
// "4096 bytes": how budget errors write sizes.
inline std::string bytes_text(std::uint64_t n) { return std::to_string(n) + " bytes"; }
// The alignment every residency allocation asks for (GpuBackend's default):
// one alignment, so a pooled block fits any later value of its size.
inline constexpr std::uint64_t kBlockAlignment = 256;

// The error for host memory running out (std::bad_alloc caught): built
// without allocating (a short message).
inline Error out_of_host_memory() noexcept {
  Error e;
  e.code = ErrorCode::out_of_memory;
  e.message = "host memory";
  return e;
}
}  // namespace residency

struct Residency::Impl {
  // How an entry is being asked for: pinned by the engine, pinned while a
  // derivation that reads it is built (for a demand load, or for a
  // prefetch), or prefetched (not pinned). Nothing done for a prefetch
  // ever waits, so a demand load may wait for prefetches without deadlock.
  enum class Use : std::uint8_t { pin, dependency, prefetch_dependency, prefetch };
  static bool for_prefetch(Use u) noexcept { return u == Use::prefetch || u == Use::prefetch_dependency; }

  Impl(GpuBackend& g, const Model& m, const ResidencyOptions& o, std::string l)
      : gpu(g), model(m), store(m.store()), options(o), label(std::move(l)) {}

  GpuBackend& gpu;
  const Model& model;
  const WeightStore& store;
  ResidencyOptions options;
  std::string label;
  Residency* self = nullptr;
  std::uint64_t budget = kUnlimitedBudget;  // under `mutex` after create(): set_budget() changes it
  std::unordered_map<ValueId, ResidencyStrategy> overrides;
  std::unique_ptr<DeviceWeights> registrations;  // the zero_copy weights, when any

  mutable std::mutex mutex;
  std::condition_variable changed;  // an entry finished loading (or failed to)
  std::map<identity::Entry, std::unique_ptr<residency::Entry>> entries;
  std::vector<residency::Entry*> all;  // the same entries, in creation order (Entry::seq)
  residency::EvictionIndex eviction;   // the candidates for eviction, O(log n) per choice
  std::uint64_t held = 0;              // bytes resident, being loaded, pooled, or stuck
  residency::BlockPool pool;           // evicted blocks kept for the next value of their size (in `held`)
  std::uint64_t peak = 0;
  std::uint64_t pinned = 0;
  residency::EvictionClock clock;
  std::uint64_t load_clock = 0;
  std::uint64_t prefetch_loads = 0;  // loads for a prefetch in progress (a demand load short of room waits for them)
  ResidencyStats counters;
  std::atomic<std::uint64_t> paging_ns{0};
  std::atomic<std::uint64_t> host_copies{0};  // bytes a page-in was handed that were not the store's own
  struct Stuck {
    DevicePtr ptr = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<Stuck> stuck;  // frees the backend refused: still held; retried when room is short, and at release
  std::uint64_t stuck_bytes() const noexcept {
    std::uint64_t n = 0;
    for (const Stuck& s : stuck) n += s.bytes;
    return n;
  }
  // load()'s staging registrations whose end the backend refused twice:
  // asked again (and reported) by release().
  std::vector<DevicePtr> stuck_registrations;
  bool released = false;
  // The engine's plan (options.derivations or the model's, under the
  // policy) and its groups: fixed at create().
  std::vector<PlannedDerivation> plan;
  std::vector<ResidencyGroup> groups;
  // pin(group): unpins that left an entry unpinned (room another group may
  // wait for), and the one group taken at a time (pin_group.cpp).
  std::uint64_t unpins = 0;  // and budget raises: room another group may wait for
  std::mutex group_admission;
  residency::Prefetcher prefetcher;  // last: stopped before the rest goes

  // The weight's strategy as it is carried out: a zero_copy weight that
  // cannot be read in place (inline; misaligned or its file not
  // registrable, once in_place() found so) is upload.
  ResidencyStrategy strategy_of(ValueId id) const noexcept;
  // Whether the entries of `source` (itself, and what is derived from it)
  // may be evicted: it is paged, and no other name of the same bytes (a
  // tied weight) stays on the device (kept_bytes). Decided by the bytes, so
  // whichever name reaches a shared entry first, it is the same.
  bool evictable(ValueId source) const;
  std::set<identity::Bytes> kept_bytes;  // weights that stay once placed, by bytes (create(), under a budget)
  // What any budget of this residency must hold (create(), under a
  // budget): the largest pin, beside (when anything is paged) the bytes
  // that stay once placed. check_budget says whether `bytes` does, and if
  // not, why, naming both (create() and set_budget()).
  struct BudgetMinimum {
    std::uint64_t largest = 0;
    std::string largest_what;
    std::uint64_t kept = 0;
    bool any_paged = false;
  };
  BudgetMinimum minimum;
  bool sized = false;  // create() sized a budget (and `minimum`): set_budget() may change it
  Status check_budget(std::uint64_t bytes) const;
  // A zero_copy weight's pointer in its registration; nullopt (and upload
  // from then on) when it cannot be read in place.
  Result<std::optional<DevicePtr>> in_place(ValueId id);
  mutable std::mutex uploaded_instead_mutex;  // never held while taking `mutex`
  std::unordered_set<ValueId> uploaded_instead;
  // options.derivations (or plan_derivations(model)) under options.policy:
  // what create() sizes the budget with and load() loads.
  static Result<std::vector<PlannedDerivation>> make_plan(const Model& model, const ResidencyOptions& options);

  // ---- entries (residency.cpp)
  Result<const WeightRef*> weight_ref(ValueId id) const;
  // With the lock held: records a new entry under `key`.
  residency::Entry* add_locked(const identity::Entry& key, std::unique_ptr<residency::Entry> e);
  Result<residency::Entry*> source_entry(ValueId id);
  Result<residency::Entry*> derived_entry(const PlannedDerivation& p);
  Result<Pinned> pin_source(ValueId id, Use use);
  Result<Pinned> pin_derived(const PlannedDerivation& p, Use use);
  // Makes `e` resident (loading it once across threads) and, unless
  // prefetching, pins it.
  Status acquire(residency::Entry& e, Use use);
  // With the lock held: after release() nothing is placed again, by
  // acquire() or by a zero_copy pin (which would register the file anew
  // behind a teardown that reported every registration ended).
  Status refuse_after_release_locked() const;
  Pinned handle(residency::Entry& e);
  void unpin(residency::Entry& e) noexcept;

  // Residency::load's work (cold_load.cpp), which may throw.
  Result<ResidencyLoadReport> load(const ResidencyLoadOptions& options);
  // Residency::set_budget's work (set_budget.cpp).
  Status set_budget(std::uint64_t bytes);
  // Counts a prefetch that could not be queued (residency.cpp).
  void prefetch_not_queued() noexcept;

  // ---- groups (pin_group.cpp)
  Result<PinnedSet> pin_group(const ResidencyGroup& group, std::chrono::milliseconds wait_for_room);

  // ---- loading (loading.cpp)
  struct Loaded {
    DevicePtr first = 0;
    DevicePtr second = 0;
  };
  Result<Loaded> page_in(const residency::Entry& e, residency::Requester who);
  Result<Loaded> build(const residency::Entry& e, residency::Requester who);
  // Device blocks of `sizes` (one or two) for `what`: each taken from the
  // pool when a block of its exact size is there, the rest counted as held
  // (releasing pooled blocks first, then evicting under the policy, until
  // they fit) and allocated. On error nothing is held for them; a
  // backend's error carries `allocating` as its context.
  struct Blocks {
    DevicePtr ptr[2] = {0, 0};
  };
  // `own_operands`: the bytes of the operands this request's build holds
  // pinned (0 for a page-in), named in an out_of_memory.
  Result<Blocks> obtain(std::span<const std::uint64_t> sizes, const std::string& what, const std::string& allocating,
                        residency::Requester who, std::uint64_t own_operands = 0);
  void unreserve(std::uint64_t bytes) noexcept;
  // allocate(), releasing pooled blocks and evicting, and retrying, while
  // the DEVICE is out of memory.
  Result<DevicePtr> allocate(std::uint64_t bytes, residency::Requester who);
  // Frees an allocation this object made (unreserving it); a refused free
  // keeps it held and listed as stuck. Locks.
  void discard(DevicePtr ptr, std::uint64_t bytes) noexcept;
  // With the lock held: moves `e`'s blocks to the pool, leaving it absent.
  void evict_locked(residency::Entry& e) noexcept;
  // With the lock held: keeps a block in the pool (freeing it when the
  // pool cannot take it); still held either way until released.
  void pool_locked(DevicePtr ptr, std::uint64_t bytes) noexcept;
  // With the lock held: gives the oldest pooled block back to the backend.
  // false when the pool is empty.
  bool release_pooled_locked() noexcept;
  // With the lock held: asks the backend again for every free it refused
  // (a transient refusal must not shrink the budget until release()).
  // true when one went through.
  bool retry_stuck_locked() noexcept;
  void free_locked(DevicePtr ptr, std::uint64_t bytes) noexcept;
};

}  // namespace ballast
