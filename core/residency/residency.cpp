// Residency: the public methods, pins and single-flight loading, prefetch,
// stats and release. Device work is in loading.cpp; the eviction policy in
// eviction.cpp.
#include "residency/impl.hpp"
#include "derive/check_planned.hpp"
#include "device/foreign_backend.hpp"

#include <ballast/log.hpp>

#include <algorithm>
#include <cstdio>

namespace ballast {

using residency::Entry;
using residency::Requester;

// pin_group.cpp tells its own unpins from room other threads gave back.
thread_local std::uint64_t unpins_by_this_thread = 0;

std::string_view residency_strategy_name(ResidencyStrategy s) noexcept {
  switch (s) {
    case ResidencyStrategy::upload: return "upload";
    case ResidencyStrategy::zero_copy: return "zero-copy";
    case ResidencyStrategy::paged: return "paged";
  }
  return "unknown";
}

Result<ResidencyStrategy> parse_residency_strategy(std::string_view text) {
  if (text == "upload") return ResidencyStrategy::upload;
  if (text == "zero-copy" || text == "zero_copy") return ResidencyStrategy::zero_copy;
  if (text == "paged") return ResidencyStrategy::paged;
  return make_error(ErrorCode::invalid_argument,
                    "residency must be upload, zero-copy or paged, not '" + std::string(text) + "'");
}

// ------------------------------------------------------------------ Pinned

Pinned::Pinned(Pinned&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), entry_(std::exchange(other.entry_, nullptr)),
      first_(std::exchange(other.first_, 0)), second_(std::exchange(other.second_, 0)),
      first_bytes_(std::exchange(other.first_bytes_, 0)), second_bytes_(std::exchange(other.second_bytes_, 0)) {}

Pinned& Pinned::operator=(Pinned&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    entry_ = std::exchange(other.entry_, nullptr);
    first_ = std::exchange(other.first_, 0);
    second_ = std::exchange(other.second_, 0);
    first_bytes_ = std::exchange(other.first_bytes_, 0);
    second_bytes_ = std::exchange(other.second_bytes_, 0);
  }
  return *this;
}

Pinned::~Pinned() { reset(); }

void Pinned::reset() noexcept {
  if (owner_ != nullptr && entry_ != nullptr) owner_->unpin(entry_);
  owner_ = nullptr;
  entry_ = nullptr;
  first_ = second_ = 0;
  first_bytes_ = second_bytes_ = 0;
}

std::uint64_t PinnedSet::bytes() const noexcept {
  std::uint64_t total = 0;
  for (const std::vector<Pinned>* part : {&derived, &weights})
    for (const Pinned& p : *part) total += p.bytes();
  return total;
}

void PinnedSet::reset() noexcept {
  for (std::vector<Pinned>* part : {&derived, &weights}) {
    for (Pinned& p : *part) p.reset();
    part->clear();
  }
}

// ------------------------------------------------------------------ stats

std::string ResidencyStats::to_string() const {
  auto b = [](std::uint64_t n) { return std::to_string(n) + " B"; };
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f ms", paging_seconds * 1e3);
  return std::string(residency_strategy_name(strategy)) + ", budget " +
         (budget_bytes == kUnlimitedBudget ? std::string("unlimited") : b(budget_bytes)) + ": held " + b(device_bytes) +
         " (peak " + b(peak_device_bytes) + "), pinned " + b(pinned_bytes) + ", registered " + b(registered_bytes) +
         "; uploaded " + b(uploaded_bytes) + ", paged in " + b(paged_in_bytes) + " in " + std::to_string(page_ins) +
         " page-in(s); evictions " + std::to_string(source_evictions) + " source, " +
         std::to_string(derived_evictions) + " derived; builds " + std::to_string(derived_builds) + " (" +
         std::to_string(derived_rebuilds) + " rebuild(s)); prefetches " + std::to_string(prefetches) + " (" +
         std::to_string(prefetches_skipped) + " skipped, " + std::to_string(prefetches_failed) +
         " failed); host copies " + b(host_copy_bytes) + "; paging " + seconds + "; pool " + std::to_string(pool_hits) +
         " hit(s), " + std::to_string(pool_misses) + " miss(es), " + std::to_string(pool_releases) + " release(s), " +
         b(pooled_bytes) + " pooled; " + b(stuck_bytes) + " stuck";
}

// ------------------------------------------------------------------ Impl

ResidencyStrategy Residency::Impl::strategy_of(ValueId id) const noexcept {
  auto it = overrides.find(id);
  const ResidencyStrategy chosen = it == overrides.end() ? options.strategy : it->second;
  if (chosen != ResidencyStrategy::zero_copy) return chosen;
  // A zero_copy weight that cannot be read in place is uploaded, by this
  // object and under its budget: an inline one always, another once its
  // registration said so (in_place(), from a pin or load()).
  auto w = store.weights().find(id);
  if (w != store.weights().end() && !w->second.is_external()) return ResidencyStrategy::upload;
  std::lock_guard lock(uploaded_instead_mutex);
  return uploaded_instead.contains(id) ? ResidencyStrategy::upload : chosen;
}

bool Residency::Impl::evictable(ValueId source) const {
  return strategy_of(source) == ResidencyStrategy::paged &&
         (kept_bytes.empty() || !kept_bytes.contains(identity::of_bytes(store, source)));
}

Result<std::optional<DevicePtr>> Residency::Impl::in_place(ValueId id) {
  auto resolved = registrations->resolve_in_place(id);
  // Named as a page-in is ("paging in weight 'x'"): a file changed under a
  // zero-copy weight said only which derivation pinned it.
  if (!resolved.ok())
    return std::move(resolved.error()).with_context("registering weight '" + std::string(model.value_name(id)) + "'");
  const std::optional<DevicePtr> ptr = *resolved;
  if (!ptr) {
    std::lock_guard lock(uploaded_instead_mutex);
    uploaded_instead.insert(id);
  }
  return ptr;
}

Result<const WeightRef*> Residency::Impl::weight_ref(ValueId id) const {
  auto it = store.weights().find(id);
  if (it == store.weights().end())
    return make_error(ErrorCode::not_found, "'" + std::string(model.value_name(id)) + "' is not a weight of the model");
  return &it->second;
}

Entry* Residency::Impl::add_locked(const identity::Entry& key, std::unique_ptr<Entry> e) {
  all.reserve(all.size() + 1);  // so that the push_back below cannot throw after the map holds it
  Entry* raw = e.get();
  raw->seq = all.size();
  entries.emplace(key, std::move(e));
  all.push_back(raw);
  return raw;
}

Result<Entry*> Residency::Impl::source_entry(ValueId id) {
  BALLAST_ASSIGN_OR_RETURN(const WeightRef* ref, weight_ref(id));
  const identity::Entry key = identity::of_source(store, id);
  std::lock_guard lock(mutex);
  if (auto it = entries.find(key); it != entries.end()) return it->second.get();
  auto e = std::make_unique<Entry>();
  e->weight = id;
  e->name = "weight '" + std::string(model.value_name(id)) + "'";
  e->evictable = evictable(id);
  e->first_bytes = ref->byte_length();
  return add_locked(key, std::move(e));
}

Result<Entry*> Residency::Impl::derived_entry(const PlannedDerivation& p) {
  BALLAST_RETURN_IF_ERROR(derive::check_planned(model, p));  // an entry from outside: this model's, as planned
  const identity::Entry key = identity::of_derivation(store, p);
  std::lock_guard lock(mutex);
  if (auto it = entries.find(key); it != entries.end()) return it->second.get();
  // First sight of this value: size it and name it once.
  DerivationLaunch l = p.launch;
  // Named for the node it was first pinned for (a value two nodes share is one entry).
  std::string name = std::string(derivation_name(p.kind())) + " of '" + p.weight + "'" +
                     (p.node.empty() ? "" : " for node '" + p.node + "'");
  auto sizes = derivation_sizes(l);
  if (!sizes.ok()) return std::move(sizes.error()).with_context("sizing " + name);
  auto e = std::make_unique<Entry>();
  e->derived = true;
  e->weight = p.source;
  e->plan = p;
  e->name = std::move(name);
  e->evictable = evictable(p.source);
  e->first_bytes = sizes->dst_bytes;
  e->second_bytes = sizes->dst2_bytes;
  return add_locked(key, std::move(e));
}

Pinned Residency::Impl::handle(Entry& e) {
  std::lock_guard lock(mutex);
  return Pinned(self, &e, e.first, e.second, e.first_bytes, e.second_bytes);
}

Result<Pinned> Residency::Impl::pin_source(ValueId id, Use use) {
  if (strategy_of(id) == ResidencyStrategy::zero_copy) {
    {
      std::lock_guard lock(mutex);
      BALLAST_RETURN_IF_ERROR(refuse_after_release_locked());
    }
    // Registered for the model's life: nothing to pin.
    BALLAST_ASSIGN_OR_RETURN(const WeightRef* ref, weight_ref(id));
    BALLAST_ASSIGN_OR_RETURN(auto ptr, in_place(id));
    if (ptr) {
      if (use == Use::prefetch) return Pinned();
      return Pinned(self, nullptr, *ptr, 0, ref->byte_length(), 0);
    }
    // Not readable in place: from here on an upload entry like any other.
  }
  BALLAST_ASSIGN_OR_RETURN(Entry * e, source_entry(id));
  BALLAST_RETURN_IF_ERROR(acquire(*e, use));
  if (use == Use::prefetch) return Pinned();
  return handle(*e);
}

Result<Pinned> Residency::Impl::pin_derived(const PlannedDerivation& p, Use use) {
  BALLAST_ASSIGN_OR_RETURN(Entry * e, derived_entry(p));
  BALLAST_RETURN_IF_ERROR(acquire(*e, use));
  if (use == Use::prefetch) return Pinned();
  return handle(*e);
}

Status Residency::Impl::refuse_after_release_locked() const {
  if (released) return make_error(ErrorCode::invalid_argument, label + ": pin after release()");
  return Status();
}

Status Residency::Impl::acquire(Entry& e, Use use) {
  std::unique_lock lock(mutex);
  // As load(): after release() nothing is placed again (a pin would
  // allocate behind a teardown that reported the device clean).
  BALLAST_RETURN_IF_ERROR(refuse_after_release_locked());
  if ((use == Use::pin || use == Use::prefetch) && !e.requested) {
    e.requested = true;
    ++clock.distinct_entries;
    eviction.update(e);  // out of class 1 (dependencies only)
  }
  auto note_use = [&] {
    if (e.pins++ == 0) pinned += e.bytes();
    if (use == Use::pin) {
      e.last_use = ++clock.now;
      e.awaiting_use = false;
    }
    eviction.erase(e);  // pinned: no longer a candidate (erasing allocates nothing)
  };
  for (;;) {
    if (e.state == Entry::State::resident) {
      if (use != Use::prefetch) note_use();
      return Status();
    }
    if (e.state == Entry::State::absent) break;
    if (use == Use::prefetch) return Status();  // already coming
    if (use == Use::prefetch_dependency)        // a prefetch never waits: it gives up
      return make_error(ErrorCode::unavailable, e.name + " is being loaded by another caller");
    const std::uint64_t failures = e.failures;
    changed.wait(lock, [&] { return e.state != Entry::State::loading; });
    // The load this call joined failed: its error is this call's too. (A
    // failed prefetch is not: it gave up on rules a demand load does not
    // have, so the loop retries as the loader.)
    if (e.state == Entry::State::absent && e.failures != failures && !e.failure.ok()) return e.failure;
  }
  e.state = Entry::State::loading;
  eviction.erase(e);
  const bool prefetching = for_prefetch(use);
  if (prefetching) ++prefetch_loads;
  lock.unlock();

  const Requester who = prefetching ? Requester::prefetch : Requester::demand;
  // Out of host memory inside the load is its failure like any other: an
  // exception here would leave the entry loading, and every later caller
  // waiting for it for good.
  Result<Loaded> loaded = Loaded{};
  try {
    loaded = e.derived ? build(e, who) : page_in(e, who);
  } catch (const std::bad_alloc&) {
    loaded = residency::out_of_host_memory();
  }

  lock.lock();
  if (prefetching) --prefetch_loads;
  if (!loaded.ok()) {
    // No room (or another caller loading it) is a prefetch's skip; any
    // other error (the file, the device) is a failure the engine hears of
    // now, not only at its next pin.
    const ErrorCode code = loaded.error().code;
    const bool skipped = code == ErrorCode::out_of_memory || code == ErrorCode::unavailable;
    // What allocates comes before the state changes: the waiters must be
    // woken whatever happens after.
    Status failure;
    std::string text;
    try {
      if (!prefetching) failure = Status(loaded.error());
      if (use == Use::prefetch && !skipped)
        text = "prefetch of " + e.name + " failed (a pin will try again): " + loaded.error().to_string();
    } catch (const std::bad_alloc&) {
      if (!prefetching) failure = residency::out_of_host_memory();
    }
    e.state = Entry::State::absent;
    ++e.failures;
    e.failure = std::move(failure);
    if (use == Use::prefetch) ++(skipped ? counters.prefetches_skipped : counters.prefetches_failed);
    changed.notify_all();
    if (!text.empty()) {
      lock.unlock();
      log_message(LogLevel::warning, "residency", text);
    }
    return loaded.status();
  }
  e.first = loaded->first;
  e.second = loaded->second;
  e.state = Entry::State::resident;
  e.loaded_at = ++load_clock;
  if (e.derived) {
    ++counters.derived_builds;
    if (e.loads > 0) ++counters.derived_rebuilds;
  } else {
    if (e.evictable) {  // a page-in is paged's: an upload is counted in uploaded_bytes alone
      ++counters.page_ins;
      counters.paged_in_bytes += e.first_bytes;
    } else {
      counters.uploaded_bytes += e.first_bytes;
    }
  }
  ++e.loads;
  if (use == Use::prefetch) {
    e.awaiting_use = true;
    ++counters.prefetches;
    eviction.update(e);
  } else {
    note_use();
  }
  changed.notify_all();
  return Status();
}

void Residency::Impl::unpin(Entry& e) noexcept {
  std::lock_guard lock(mutex);
  if (e.pins > 0 && --e.pins == 0) {
    pinned -= std::min(pinned, e.bytes());
    ++unpins;
    ++unpins_by_this_thread;
    changed.notify_all();  // room a group may be waiting for (pin_group.cpp)
    try {
      eviction.update(e);  // a candidate again
    } catch (...) {
      // Out of memory filing it: it stays resident but is never chosen, so
      // the budget may refuse a request it could have met; never a leak.
    }
  }
}

// ------------------------------------------------------------------ Residency

Residency::Residency(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->self = this; }

Residency::~Residency() {
  if (impl_ && !impl_->released) static_cast<void>(release(impl_->gpu));
}

void Residency::unpin(void* entry) noexcept { impl_->unpin(*static_cast<Entry*>(entry)); }

namespace {

// Nothing throws across the public API: host memory running out while an
// entry is filed or named is out_of_memory (the entry tables are left as
// they were: add_locked reserves before it files).
template <class F>
auto without_throwing(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return residency::out_of_host_memory();
  }
}

}  // namespace

Result<Pinned> Residency::pin(ValueId weight) {
  return without_throwing([&] { return impl_->pin_source(weight, Impl::Use::pin); });
}

Result<Pinned> Residency::pin(std::string_view weight) {
  return without_throwing([&]() -> Result<Pinned> {
    auto id = impl_->model.value_id(weight);
    if (!id) return make_error(ErrorCode::not_found, "the model has no value named '" + std::string(weight) + "'");
    return pin(*id);
  });
}

Result<Pinned> Residency::pin(const PlannedDerivation& derivation) {
  return without_throwing([&] { return impl_->pin_derived(derivation, Impl::Use::pin); });
}

// A prefetch that cannot even be queued (no host memory for the job, no
// thread for the worker) is a failed prefetch, counted: prefetch() returns
// nothing, so it throws nothing, and the next pin of the value tries again.
void Residency::Impl::prefetch_not_queued() noexcept {
  try {
    std::lock_guard lock(mutex);
    ++counters.prefetches_failed;
  } catch (...) {  // the lock itself failed: uncounted, still not thrown
  }
}

void Residency::prefetch(std::span<const ValueId> weights) {
  for (ValueId id : weights) {
    try {
      impl_->prefetcher.post(
          [impl = impl_.get(), id] { static_cast<void>(impl->pin_source(id, Impl::Use::prefetch)); });
    } catch (...) {
      impl_->prefetch_not_queued();
    }
  }
}

void Residency::prefetch(std::span<const PlannedDerivation> derivations) {
  for (const PlannedDerivation& p : derivations) {
    try {
      impl_->prefetcher.post([impl = impl_.get(), p] { static_cast<void>(impl->pin_derived(p, Impl::Use::prefetch)); });
    } catch (...) {
      impl_->prefetch_not_queued();
    }
  }
}

void Residency::prefetch(const ResidencyGroup& group) {
  prefetch(std::span<const PlannedDerivation>(group.derivations));
  prefetch(std::span<const ValueId>(group.weights));
}

Result<PinnedSet> Residency::pin(const ResidencyGroup& group, std::chrono::milliseconds wait_for_room) {
  return without_throwing([&] { return impl_->pin_group(group, wait_for_room); });
}

void Residency::wait_for_prefetches() { impl_->prefetcher.wait_idle(); }

std::span<const PlannedDerivation> Residency::plan() const noexcept { return impl_->plan; }

std::span<const ResidencyGroup> Residency::groups() const noexcept { return impl_->groups; }

ResidencyStats Residency::stats() const {
  ResidencyStats s;
  {
    std::lock_guard lock(impl_->mutex);
    s = impl_->counters;
    s.device_bytes = impl_->held;
    s.peak_device_bytes = impl_->peak;
    s.pinned_bytes = impl_->pinned;
    s.pooled_bytes = impl_->pool.bytes();
    s.stuck_bytes = impl_->stuck_bytes();
    s.budget_bytes = impl_->budget;
  }
  s.strategy = impl_->options.strategy;
  s.paging_seconds = static_cast<double>(impl_->paging_ns.load()) * 1e-9;
  s.host_copy_bytes = impl_->host_copies.load();
  if (impl_->registrations) {
    const WeightResidency r = impl_->registrations->residency();
    s.registered_bytes = r.registered_bytes;
    s.uploaded_bytes += r.uploaded_bytes;
    s.host_copy_bytes += r.host_copy_bytes;
  }
  return s;
}

std::uint64_t Residency::budget() const noexcept {
  std::lock_guard lock(impl_->mutex);  // set_budget() may change it
  return impl_->budget;
}

ResidencyStrategy Residency::strategy_of(ValueId weight) const noexcept { return impl_->strategy_of(weight); }

WeightResidency Residency::registrations() const {
  return impl_->registrations ? impl_->registrations->residency() : WeightResidency{};
}

std::string Residency::label() const { return impl_->label; }

Released Residency::release(GpuBackend& backend) {
  Impl& m = *impl_;
  Released out;
  // Everything here was allocated or registered on m.gpu: freed on another
  // backend, each free would be refused (or, where two devices hand out
  // the same addresses, free someone else's) and the entries would be
  // forgotten all the same. Refused whole, nothing touched.
  if (&backend != &m.gpu) {
    out.status = device::foreign_backend(label(), m.gpu, backend);
    return out;
  }
  m.prefetcher.stop();
  auto note = [&](Status s) {
    if (s.ok()) return;
    ++out.failed_frees;
    if (out.status.ok()) out.status = std::move(s);
  };
  {
    std::lock_guard lock(m.mutex);
    // An engine that releases while it still holds pins is told so (their
    // pointers die here); resetting such a Pinned afterwards is harmless
    // as long as this object lives.
    std::uint64_t still_pinned = 0;
    const Entry* first_pinned = nullptr;
    for (const Entry* e : m.all)
      if (e->state == Entry::State::resident && e->pins > 0 && still_pinned++ == 0) first_pinned = e;
    if (first_pinned != nullptr)
      out.status = make_error(ErrorCode::invalid_argument,
                              label() + ": released with " + std::to_string(still_pinned) +
                                  " value(s) still pinned (first: " + first_pinned->name +
                                  "); their device pointers are freed now");
    for (Entry* e : m.all) {
      if (e->state != Entry::State::resident) continue;
      for (auto [ptr, bytes] : {std::pair{e->first, e->first_bytes}, std::pair{e->second, e->second_bytes}}) {
        if (ptr == 0) continue;
        Status s = backend.free(ptr);
        if (s.ok()) {
          out.bytes_freed += bytes;
          ++out.allocations_freed;
        }
        note(std::move(s).with_context("freeing " + e->name));
      }
      e->first = e->second = 0;
      e->state = Entry::State::absent;
      e->pins = 0;
      m.eviction.erase(*e);
    }
    for (const Impl::Stuck& st : m.stuck) {
      Status s = backend.free(st.ptr);
      if (s.ok()) {
        out.bytes_freed += st.bytes;
        ++out.allocations_freed;
      }
      note(std::move(s).with_context("freeing an evicted value"));
    }
    m.stuck.clear();
    for (DevicePtr registration : m.stuck_registrations)
      note(backend.unregister_host(registration).with_context("ending the staging buffers' registration"));
    m.stuck_registrations.clear();
    // The pool's blocks are the object's too: none outlives it.
    while (auto b = m.pool.take_oldest()) {
      Status s = backend.free(b->ptr);
      if (s.ok()) {
        out.bytes_freed += b->bytes;
        ++out.allocations_freed;
      }
      note(std::move(s).with_context("freeing a pooled block"));
    }
    m.held = 0;
    m.pinned = 0;
  }
  if (m.registrations) {
    Released r = m.registrations->release(backend);
    out.bytes_freed += r.bytes_freed;
    out.allocations_freed += r.allocations_freed;
    out.failed_frees += r.failed_frees;
    if (out.status.ok() && !r.status.ok()) out.status = std::move(r.status);
  }
  m.released = true;
  return out;
}

}  // namespace ballast
