// Residency::load(): the model from storage to the device by explicit
// reads, not page faults (docs/loading.md).
//
// The pipeline, on three kinds of thread:
//   the reader (read/)   large parallel reads of the plan into a ring of
//                        staging buffers;
//   the caller           takes each filled buffer in file order and copies
//                        its pieces into the device blocks of the source
//                        values they belong to; a value whose last byte
//                        arrived becomes resident at once;
//   the builder          builds each derivation whose sources are all in,
//                        in plan order, while the reads go on.
// So reading, host-to-device copies and derivation kernels overlap, and
// staging memory stays at the ring's size whatever the model's.
#include "residency/impl.hpp"

#include "derive/identity.hpp"
#include "derive/transposed_source.hpp"
#include "store/byte_ranges.hpp"

#include <ballast/log.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_map>

namespace ballast {

using residency::Entry;
using residency::Requester;

std::string ResidencyLoadReport::to_string() const {
  char head[256];
  const double mb_s = read.seconds > 0 ? static_cast<double>(read.bytes) / read.seconds / 1e6 : 0;
  std::snprintf(head, sizeof head,
                "read %.1f MiB in %.3f s (%.0f MB/s, %s, %u file(s), %llu range(s), O_DIRECT %u of %u, "
                "staging %.1f MiB)",
                static_cast<double>(read.bytes) / (1 << 20), read.seconds, mb_s,
                std::string(read_engine_name(read.engine)).c_str(), planned_files,
                static_cast<unsigned long long>(planned_ranges), read.direct_files, read.files,
                static_cast<double>(read.staging_bytes) / (1 << 20));
  char tail[64];
  std::snprintf(tail, sizeof tail, "; %.3f s", seconds);
  return std::string(head) + "; " + std::to_string(sources_read) + " source(s) read, " +
         std::to_string(sources_cached) + " from the page cache (" + std::to_string(cached_bytes) + " B), " +
         std::to_string(inline_sources) + " inline, " + std::to_string(zero_copy_weights) + " zero-copy (" +
         std::to_string(populated_bytes) + " B populated, " + std::to_string(zero_copy_uploads) +
         " uploaded instead); " + std::to_string(derived_built) + " derived; " + std::to_string(already_resident) +
         " already resident; " + std::to_string(left_for_demand) + " left for demand (" + std::to_string(left_bytes) +
         " B)" + tail;
}

namespace {

// A source value the read fills.
struct Target {
  Entry* entry = nullptr;
  MappingId mapping = 0;
  std::uint64_t offset = 0;  // in the file
  std::uint64_t length = 0;
  DevicePtr ptr = 0;
  std::uint64_t remaining = 0;
  std::vector<std::size_t> waiting;  // derivations (indexes into the builder's list) that read it
};

// Runs jobs in the order posted on one thread; the first error stops the
// rest (they are dropped) and is kept.
class Builder {
 public:
  explicit Builder(std::function<Status(std::size_t)> run) : run_(std::move(run)), thread_([this] { loop(); }) {}
  ~Builder() { (void)finish(); }
  void post(std::size_t job) {
    std::lock_guard lock(mutex_);
    queue_.push_back(job);
    changed_.notify_all();
  }
  // Drops what is queued (when `abandon`), waits for the rest, joins.
  Status finish(bool abandon = false) {
    {
      std::lock_guard lock(mutex_);
      if (abandon) queue_.clear();
      closing_ = true;
      changed_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    return error_;
  }

 private:
  void loop() {
    for (;;) {
      std::size_t job;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = queue_.front();
        queue_.pop_front();
        if (!error_.ok()) continue;  // a failed build ends the load: drop the rest
      }
      Status s = run_(job);
      if (!s.ok()) {
        std::lock_guard lock(mutex_);
        if (error_.ok()) error_ = std::move(s);
      }
    }
  }
  std::function<Status(std::size_t)> run_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::size_t> queue_;
  bool closing_ = false;
  Status error_;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace

// No exception leaves load(): host memory running out is out_of_memory, a
// thread the system refused unavailable. What was marked loading is
// abandoned on the way out (AbandonOnThrow, below), so waiters hear it.
Result<ResidencyLoadReport> Residency::load(const ResidencyLoadOptions& options) {
  try {
    return impl_->load(options);
  } catch (const std::bad_alloc&) {
    return residency::out_of_host_memory();
  } catch (const std::system_error& e) {
    return make_error(ErrorCode::unavailable, std::string("load(): the system refused a thread: ") + e.what());
  }
}

Result<ResidencyLoadReport> Residency::Impl::load(const ResidencyLoadOptions& options) {
  Impl& m = *this;
  const auto start = std::chrono::steady_clock::now();
  ResidencyLoadReport report;
  {
    std::lock_guard lock(m.mutex);
    if (m.released) return make_error(ErrorCode::invalid_argument, m.label + ": load() after release()");
  }
  BALLAST_RETURN_IF_ERROR(check_read_options(options.read), "loading " + m.label);
  const WeightStore& store = m.store;

  std::vector<PlannedDerivation> own_plan;
  if (m.plan.empty()) {
    BALLAST_ASSIGN_OR_RETURN(own_plan, Impl::make_plan(m.model, m.options));
  }
  const std::vector<PlannedDerivation>& plan = m.plan.empty() ? own_plan : m.plan;

  // ---- 1. What to load, in order, each value once, under the budget.
  // A derivation's operands come before it (a transpose its copy reads
  // before that), then the weights no derivation reads.
  struct Item {
    Entry* entry = nullptr;  // nullptr: a zero_copy weight
    ValueId weight{};        // a source item's weight
    const PlannedDerivation* derivation = nullptr;
  };
  std::vector<Item> items;
  std::vector<PlannedDerivation> transposes;  // the copies of_transposed entries read
  transposes.reserve(plan.size());
  std::set<const Entry*> seen;
  std::set<identity::Bytes> zero_copy_seen;  // tied names: one value, registered and counted once
  std::uint64_t need = 0;  // device bytes the items taken so far add
  bool full = false;
  std::uint64_t room;  // what the budget has left now
  {
    std::lock_guard lock(m.mutex);
    room = m.budget == kUnlimitedBudget ? kUnlimitedBudget : (m.held >= m.budget ? 0 : m.budget - m.held);
  }
  // Adds `e` unless seen or resident. Once one value does not fit, none
  // after it is taken either (`full`), so what loads is a prefix of the plan.
  auto take = [&](Entry* e, Item item) {
    if (!seen.insert(e).second) return;
    bool resident;
    {
      std::lock_guard lock(m.mutex);
      resident = e->state != Entry::State::absent;
    }
    if (resident) {
      ++report.already_resident;
      return;
    }
    if (full || e->bytes() > room - std::min(room, need)) {
      full = true;
      ++report.left_for_demand;
      report.left_bytes += e->bytes();
      return;
    }
    need += e->bytes();
    item.entry = e;
    items.push_back(item);
  };
  auto take_source = [&](ValueId id) -> Status {
    if (m.strategy_of(id) == ResidencyStrategy::zero_copy) {
      if (zero_copy_seen.insert(identity::of_bytes(store, id)).second) items.push_back(Item{nullptr, id, nullptr});
      return Status();
    }
    BALLAST_ASSIGN_OR_RETURN(Entry * e, m.source_entry(id));
    take(e, Item{nullptr, id, nullptr});
    return Status();
  };
  for (const PlannedDerivation& p : plan) {
    if (p.of_transposed) {
      BALLAST_RETURN_IF_ERROR(take_source(p.source));
      transposes.push_back(transposed_source_of(p));
      BALLAST_ASSIGN_OR_RETURN(Entry * t, m.derived_entry(transposes.back()));
      take(t, Item{nullptr, p.source, &transposes.back()});
    }
    for (const std::optional<ValueId>& id : source_operands(p))
      if (id) BALLAST_RETURN_IF_ERROR(take_source(*id));
    BALLAST_ASSIGN_OR_RETURN(Entry * e, m.derived_entry(p));
    take(e, Item{nullptr, p.source, &p});
  }
  for (ValueId id : m.model.weight_order())
    if (store.weights().contains(id)) BALLAST_RETURN_IF_ERROR(take_source(id));

  // ---- 2. zero_copy: the pages faulted in by parallel populates, then
  // registered (in_place), so no driver takes the faults one at a time; a
  // weight that cannot be read in place is an upload from here on.
  std::vector<ValueId> uploads_instead;  // zero_copy weights that cannot be read in place
  {
    std::map<MappingId, std::vector<ByteRange>> ranges;
    std::vector<ValueId> registered;
    for (const Item& item : items) {
      if (item.entry != nullptr) continue;
      registered.push_back(item.weight);
      const WeightRef& ref = store.weights().at(item.weight);
      if (auto prov = store.external_mmap_provenance(ref); prov && prov->length > 0)
        ranges[prov->mapping].push_back({prov->offset, prov->length});
    }
    for (auto& [mapping, list] : ranges) {
      std::vector<ReadRange> merged;  // each page populated once, however many weights share it
      for (const ByteRange& r : store::merge_ranges(std::move(list), ~std::uint64_t{0}))
        merged.push_back({r.offset, r.length});
      const std::uint32_t threads =
          options.populate_threads != 0 ? options.populate_threads : std::max(1u, std::thread::hardware_concurrency());
      auto populated = populate_mapping(store, mapping, merged, threads, options.populate_piece_bytes);
      if (!populated.ok()) return std::move(populated.error()).with_context("populating zero-copy pages");
      report.populated_bytes += *populated;
    }
    for (ValueId id : registered) {
      BALLAST_ASSIGN_OR_RETURN(auto ptr, m.in_place(id));  // its error names the weight
      if (ptr)
        ++report.zero_copy_weights;
      else
        uploads_instead.push_back(id);  // an upload from now on: copied last (step 6)
    }
  }

  // ---- 3. The source values the read fills: marked loading (a pin of one
  // meanwhile waits for it), with their device blocks.
  std::vector<Target> targets;
  std::unordered_map<const Entry*, std::size_t> target_of;
  std::vector<ValueId> read_ids;
  // On any failure: back to absent, blocks given back, waiters told.
  // Throws nothing: it also runs while an exception unwinds (below).
  auto abandon = [&](const Status& why) noexcept {
    std::lock_guard lock(m.mutex);
    for (Target& t : targets) {
      // A completed target is the residency's from complete() on, whatever
      // its state now: another pin may have evicted it (its block pooled
      // or freed, maybe taken by another value) or be paging it in again.
      // Only the blocks still being filled are this load's to give back.
      if (t.remaining == 0) continue;
      // Given back, not pooled: a failed load leaves the device as it found it.
      if (t.ptr != 0) m.free_locked(t.ptr, t.length);
      t.ptr = 0;
      t.remaining = 0;  // abandoned once: never given back twice
      t.entry->state = Entry::State::absent;
      ++t.entry->failures;
      try {
        t.entry->failure = why;
      } catch (...) {  // no memory to copy the reason: the failure is counted all the same
      }
    }
    m.changed.notify_all();
  };
  // An exception from here on (host memory running out in a container,
  // a message, the reader's set-up) abandons the targets as an error
  // does: left loading, they would keep every pin of them waiting for
  // good. Declared before the builder, so it runs after the builder's
  // jobs have finished with them.
  struct AbandonOnThrow {
    decltype(abandon)& run;
    int uncaught = std::uncaught_exceptions();
    ~AbandonOnThrow() {
      if (std::uncaught_exceptions() <= uncaught) return;
      // The exception itself reaches Residency::load(), which says it as
      // an error; a pin that waited
      // for one of these values hears this. Ok when even this cannot be
      // made: such a waiter then loads the value itself.
      Status why;
      try {
        why = make_error(ErrorCode::unavailable,
                         "the load() reading it ended by an exception (host memory, or a thread the system refused)");
      } catch (...) {
      }
      run(why);
    }
  } abandon_on_throw{abandon};
  // Room for every target before any is marked loading: a target marked
  // but not filed (a push that threw) would be abandoned by no one.
  targets.reserve(items.size());
  read_ids.reserve(items.size());
  for (const Item& item : items) {
    if (item.entry == nullptr || item.entry->derived) continue;
    const WeightRef& ref = store.weights().at(item.entry->weight);
    auto prov = store.external_mmap_provenance(ref);
    if (!prov || prov->length == 0) continue;  // inline (or empty): the builder pins it from its mapping
    if (!options.read_cached) {
      // Warm: the page cache holds it whole, so the mapping is the fast
      // way (one copy, no read); the builder pins it from there.
      const ReadRange range{prov->offset, prov->length};
      auto cached = cached_bytes(store, prov->mapping, std::span(&range, 1));
      if (cached.ok() && *cached == prov->length) {
        ++report.sources_cached;
        report.cached_bytes += prov->length;
        continue;
      }
    }
    {
      std::lock_guard lock(m.mutex);
      if (item.entry->state != Entry::State::absent) continue;  // another thread got there first
      item.entry->state = Entry::State::loading;
      m.eviction.erase(*item.entry);
      // Within the capacity reserved above: neither throws.
      targets.push_back(Target{item.entry, prov->mapping, prov->offset, prov->length, 0, prov->length, {}});
      read_ids.push_back(item.entry->weight);
    }
    target_of[item.entry] = targets.size() - 1;
    const std::uint64_t sizes[] = {prov->length};
    auto blocks = m.obtain(sizes, item.entry->name, "allocating " + item.entry->name, Requester::demand);
    if (!blocks.ok()) {
      abandon(blocks.error());
      return std::move(blocks.error()).with_context("loading " + m.label);
    }
    targets.back().ptr = blocks->ptr[0];
  }

  // ---- 4. The builder's list: derivations, then the other values to make
  // resident (inline sources), each waiting for its targets.
  struct Job {
    const Item* item = nullptr;
    std::size_t pending = 0;  // targets not yet complete
  };
  std::vector<Job> jobs;
  for (const Item& item : items) {
    if (item.entry == nullptr) continue;
    if (!item.entry->derived && target_of.contains(item.entry)) continue;
    jobs.push_back(Job{&item, 0});
    const std::size_t job = jobs.size() - 1;
    if (!item.entry->derived) continue;
    // Its operands that the read fills (a transposed copy's source counts
    // for the quant that reads the copy: the copy is built first in order).
    std::vector<std::optional<ValueId>> operands;
    for (const auto& id : source_operands(*item.derivation)) operands.push_back(id);
    if (item.derivation->of_transposed) operands.push_back(item.derivation->source);
    std::set<std::size_t> counted;
    for (const auto& id : operands) {
      if (!id || m.strategy_of(*id) == ResidencyStrategy::zero_copy) continue;
      auto e = m.source_entry(*id);
      if (!e.ok()) continue;
      auto it = target_of.find(*e);
      if (it == target_of.end() || !counted.insert(it->second).second) continue;
      targets[it->second].waiting.push_back(job);
      ++jobs[job].pending;
    }
  }
  std::atomic<std::uint64_t> built{0}, inline_pinned{0};
  Builder builder([&](std::size_t job) -> Status {
    const Item& item = *jobs[job].item;
    if (item.entry->derived) {
      BALLAST_ASSIGN_OR_RETURN(Pinned p, m.pin_derived(*item.derivation, Impl::Use::pin));
      ++built;
      return Status();
    }
    BALLAST_ASSIGN_OR_RETURN(Pinned p, m.pin_source(item.entry->weight, Impl::Use::pin));
    if (!store.weights().at(item.entry->weight).is_external()) ++inline_pinned;
    return Status();
  });
  // Jobs waiting for nothing go now, in list order; each other goes the
  // moment its last target completes (complete() below), so the work per
  // completed target is the jobs that read it, not a scan of the list.
  for (std::size_t j = 0; j < jobs.size(); ++j)
    if (jobs[j].pending == 0) builder.post(j);

  // ---- 5. The read, placed as it arrives.
  const ReadPlan read_plan_ = ReadPlan::of(store, read_ids);
  report.planned_bytes = read_plan_.bytes();
  report.planned_ranges = read_plan_.range_count();
  report.planned_files = static_cast<std::uint32_t>(read_plan_.files().size());
  // Per file, the targets by offset; chunks of a file come in offset order,
  // so a cursor admits targets as chunks reach them and retires those done.
  std::map<MappingId, std::vector<std::size_t>> by_file;
  for (std::size_t i = 0; i < targets.size(); ++i) by_file[targets[i].mapping].push_back(i);
  for (auto& [mapping, list] : by_file)
    std::sort(list.begin(), list.end(),
              [&](std::size_t a, std::size_t b) { return targets[a].offset < targets[b].offset; });
  MappingId current = 0;
  std::size_t cursor = 0;
  std::vector<std::size_t> active;
  std::atomic<std::uint64_t> copy_ns{0};
  auto complete = [&](Target& t) {
    {
      std::lock_guard lock(m.mutex);
      Entry& e = *t.entry;
      e.first = t.ptr;
      e.second = 0;
      e.state = Entry::State::resident;
      e.loaded_at = ++m.load_clock;
      if (e.evictable) {  // as a pin's page-in: uploads are counted in uploaded_bytes alone
        ++m.counters.page_ins;
        m.counters.paged_in_bytes += e.first_bytes;
      } else {
        m.counters.uploaded_bytes += e.first_bytes;
      }
      ++e.loads;
      m.eviction.update(e);
      m.changed.notify_all();
    }
    ++report.sources_read;
    for (std::size_t j : t.waiting)  // in list order, as they were added
      if (--jobs[j].pending == 0) builder.post(j);
  };
  auto consume = [&](const ReadChunk& c) -> Status {
    const auto copy_start = std::chrono::steady_clock::now();
    if (c.mapping != current) {
      current = c.mapping;
      cursor = 0;
      active.clear();
    }
    const std::vector<std::size_t>& list = by_file[c.mapping];
    const std::uint64_t begin = c.offset, end = c.offset + c.bytes.size();
    while (cursor < list.size() && targets[list[cursor]].offset < end) active.push_back(list[cursor++]);
    Status status;
    for (std::size_t i : active) {
      Target& t = targets[i];
      const std::uint64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.length);
      if (lo >= hi) continue;
      status = m.gpu.copy_to_device(t.ptr, lo - t.offset, c.bytes.subspan(lo - begin, hi - lo));
      if (!status.ok()) {
        status = std::move(status).with_context("copying " + t.entry->name + " to the device");
        break;
      }
      t.remaining -= hi - lo;
      if (t.remaining == 0) complete(t);
    }
    std::erase_if(active, [&](std::size_t i) { return targets[i].remaining == 0; });
    copy_ns += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - copy_start).count());
    return status;
  };
  // The staging ring registered with the backend where it registers host
  // memory: on CUDA and HIP that page-locks it, and their copies from it
  // are DMA rather than a bounce through the driver's own buffer. Refused
  // (a backend that cannot, or will not for this range): copies from
  // plain memory, said once.
  ReadOptions read_options = options.read;
  // automatic: a paged residency that left values for demand will evict
  // to make room for them and page the evicted bytes in again through the
  // mapping, so what the read brought in is kept; otherwise nothing reads
  // these bytes again and keeping them would push the engine's working set
  // out (docs/loading.md, "Cache policy", measured).
  if (read_options.cache == CachePolicy::automatic)
    read_options.cache = full && m.options.strategy == ResidencyStrategy::paged ? CachePolicy::keep : CachePolicy::drop;
  report.cache = read_options.cache;
  DevicePtr staging_registration = 0;
  if (m.gpu.capabilities().host_registration && m.gpu.capabilities().read_only_registration) {
    read_options.staging_allocated = [&](std::span<std::byte> ring) -> Status {
      auto r = m.gpu.register_host(ring.data(), ring.size(), HostAccess::read_only);
      if (r.ok())
        staging_registration = *r;
      else
        log_message(LogLevel::info, "residency",
                    "staging buffers not registered (" + r.error().message + "): device copies read plain host memory");
      return Status();
    };
    read_options.staging_freeing = [&](std::span<std::byte>) noexcept {
      if (staging_registration == 0) return true;
      const DevicePtr registration = std::exchange(staging_registration, 0);
      // A registration left over a freed ring covers memory the next
      // allocation may reuse (on cpu a device block inside a read-only
      // registration, which no kernel may write). So a refusal is asked
      // again at once (a transient one goes through); one still refused is
      // kept, asked again by release() and reported there, and the reader
      // keeps the ring allocated (false), never handing its memory on.
      Status s;
      for (int attempt = 0; attempt < 2; ++attempt)
        if ((s = m.gpu.unregister_host(registration)).ok()) return true;
      {
        std::lock_guard lock(m.mutex);
        try {
          m.stuck_registrations.push_back(registration);
        } catch (...) {  // no room to keep it for release(): the ring stays all the same
        }
      }
      try {
        log_message(LogLevel::warning, "residency",
                    "the staging buffers' registration was refused its end (" + s.error().message +
                        "): release() asks again; the ring stays allocated");
      } catch (...) {
      }
      return false;
    };
  }
  Status failed;
  if (!read_plan_.empty()) {
    auto read = read_plan(store, read_plan_, read_options, consume);
    if (read.ok()) {
      report.read = *read;
    } else {
      failed = read.status();
    }
  }
  m.paging_ns += copy_ns.load();
  if (failed.ok())
    for (const Target& t : targets)
      if (t.remaining != 0) {
        failed = make_error(ErrorCode::internal, "the read ended with " + std::to_string(t.remaining) + " bytes of " +
                                                     t.entry->name + " missing");
        break;
      }
  if (!failed.ok()) {
    abandon(failed);
    (void)builder.finish(/*abandon=*/true);
    return std::move(failed).with_context("loading " + m.label);
  }
  if (Status s = builder.finish(); !s.ok()) return std::move(s).with_context("loading " + m.label);

  // ---- 6. zero_copy weights that cannot be read in place (misaligned, or
  // their file not registrable): uploaded from the mapping under the
  // budget, after the plan's values (a derivation that read one uploaded
  // it already); one that does not fit is left for demand, as any other.
  for (ValueId id : uploads_instead) {
    auto pinned = m.pin_source(id, Impl::Use::pin);
    if (pinned.ok()) {
      ++report.zero_copy_uploads;
    } else if (pinned.error().code == ErrorCode::out_of_memory) {
      ++report.left_for_demand;
      report.left_bytes += store.weights().at(id).byte_length();
    } else {
      return std::move(pinned.error())
          .with_context("loading " + m.label + ": '" + std::string(m.model.value_name(id)) + "'");
    }
  }
  report.derived_built = built.load();
  report.inline_sources = inline_pinned.load();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace ballast
