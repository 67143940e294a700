#include <ballast/device_weights.hpp>
#include <ballast/log.hpp>

#include "device/foreign_backend.hpp"
#include "device/registration_plan.hpp"
#include "store/sigbus_guard.hpp"
#include "store/store_access.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <tuple>
#include <cstdio>
#include <optional>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <unistd.h>

namespace ballast {

namespace {
// DeviceWeights::epoch(): one sequence for the whole process, so two
// DeviceWeights (or one before and after release()) never share a value.
std::uint64_t next_epoch() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

namespace device {
Error foreign_backend(const std::string& label, const GpuBackend& own, const GpuBackend& given) {
  const auto name = [](const GpuBackend& g) {
    const DeviceInfo& d = g.info();
    return d.backend + ":" + std::to_string(d.index) + " (" + d.name + ")";
  };
  return make_error(ErrorCode::invalid_argument,
                    label + ": release on " + name(given) + ", not on the backend it was made on, " + name(own) +
                        (name(own) == name(given) ? " (another open of the same device)" : "") +
                        ": refused, nothing freed; release it on its own backend");
}
}  // namespace device

struct DeviceWeights::Impl {
  std::atomic<std::uint64_t> epoch{next_epoch()};
  GpuBackend* backend = nullptr;
  const WeightStore* store = nullptr;
  std::string label;
  DeviceWeightsOptions options;

  std::mutex mutex;
  // One registration of a file's planned ranges (registration_plan.hpp);
  // ptr 0 marks a range that fell back to upload.
  struct Registration {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    DevicePtr ptr = 0;
    // The range armed for as long as it is registered: the backend's kernels
    // (the CPU's, lavapipe's) read these pages themselves, at any time, so a
    // truncation must turn them to zeros and poison the file, not kill the
    // process. Destroyed after the range is unregistered.
    std::shared_ptr<store::RegistrationArm> arm;
  };
  // Mapping id -> its ranges, sorted by offset.
  std::unordered_map<MappingId, std::vector<Registration>> registrations;
  // What the weights reference, per file: computed once, on the first
  // external weight (so a model with many files walks its weights once).
  std::optional<ReferencedWeightBytes> referenced;
  struct Resolved {
    DevicePtr ptr = 0;
    bool in_place = false;  // inside a registered mapping: read from the file's pages
  };
  std::unordered_map<ValueId, Resolved> resolved;
  std::unordered_set<ValueId> misaligned;  // counted in misaligned_uploads (resolve_in_place may see one twice)
  struct Upload {
    DevicePtr ptr = 0;
    std::uint64_t bytes = 0;
    ValueId id{};  // the weight it holds, to name it if freeing fails
  };
  std::vector<Upload> uploads;  // what this object owns
  // Where an upload's bytes came from: (mapping + 1, offset, length) in a
  // mapped file, (0, address, length) for inline bytes.
  using BytesKey = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>;
  static BytesKey bytes_key(const WeightStore& store, const WeightRef& ref) {
    if (auto p = store.external_mmap_provenance(ref)) return {std::uint64_t{p->mapping} + 1, p->offset, p->length};
    const auto b = store.bytes(ref);
    return {0, b ? reinterpret_cast<std::uintptr_t>(b->data()) : 0, ref.byte_length()};
  }
  std::map<BytesKey, DevicePtr> uploaded_by_bytes;
  WeightResidency residency;

  // Bytes go host -> device straight from where they live (the mapping or
  // the inline bytes), through WeightStore::transfer: the backend's copy
  // reads the mapping itself, and a file truncated meanwhile is an io
  // error here, never SIGBUS inside a backend (docs/reliability.md).
  Result<DevicePtr> upload(ValueId id, const WeightRef& ref) {
    const std::uint64_t length = ref.byte_length();
    // Filing the copy once made allocates nothing (room made now, doubling).
    if (uploads.size() == uploads.capacity()) uploads.reserve(std::max<std::size_t>(16, 2 * uploads.capacity()));
    auto ptr = backend->allocate(length);
    if (!ptr.ok()) return ptr.error();
    // Host memory running out (std::bad_alloc) while the copy is made frees
    // it before the exception goes on: never a device copy owned by no one.
    struct FreeOnThrow {
      GpuBackend& backend;
      DevicePtr ptr;
      bool armed = true;
      ~FreeOnThrow() {
        if (!armed) return;
        try {
          static_cast<void>(backend.free(ptr));
        } catch (...) {  // no memory for the free's own words either
        }
      }
    } free_on_throw{*backend, *ptr};
    // A device that refuses the free too (a lost one) leaves the copy live
    // and owned by no one: the error says so, with its pointer.
    auto failed = [&](Error e) -> Result<DevicePtr> {
      if (Status f = backend->free(*ptr); !f.ok()) {
        char at[24];
        std::snprintf(at, sizeof at, "0x%llx", static_cast<unsigned long long>(*ptr));
        e.message += "; then freeing its " + std::to_string(length) + "-byte device copy failed, so it stays live, " +
                     "owned by no one (" + at + "): " + f.to_string();
      }
      return e;
    };
    if (length != 0) {
      const auto own = store->bytes(ref);
      Status s = store->transfer(ref, 0, length, [&](Bytes bytes) -> Status {
        // Counted if it ever were a copy rather than the store's own bytes.
        if (!own || bytes.data() != own->data()) residency.host_copy_bytes += bytes.size();
        return backend->copy_to_device(*ptr, 0, bytes);
      });
      if (!s.ok()) {
        free_on_throw.armed = false;  // failed() frees it, or names it when the device refuses
        return failed(std::move(s.error()));
      }
    }
    free_on_throw.armed = false;
    uploads.push_back(Upload{*ptr, length, id});
    residency.uploaded_weights += 1;
    residency.uploaded_bytes += length;
    return *ptr;
  }

  // The referenced ranges of `mapping`, merged and sorted.
  const std::vector<ByteRange>& referenced_ranges(MappingId mapping) {
    if (!referenced) referenced = store->referenced_weight_bytes();
    for (const auto& f : referenced->files)
      if (f.mapping == mapping) return f.ranges;
    static const std::vector<ByteRange> none;
    return none;
  }

  // Registers the planned ranges of `mapping` once, on its first weight;
  // a range whose registration is refused has ptr 0 ("upload its weights").
  const std::vector<Registration>& registrations_for(MappingId mapping) {
    if (auto it = registrations.find(mapping); it != registrations.end()) return it->second;
    // Host memory can run out (std::bad_alloc) anywhere below, also after
    // the backend made a registration. So the entry is made first, while
    // nothing is registered, and filled with a move that cannot throw; on
    // the way out by an exception each registration made is ended, the
    // entry removed and the account put back: none stays live owned by no
    // one, and the next call plans the file again.
    const auto slot = registrations.try_emplace(mapping).first;
    std::vector<Registration> regs;
    WeightResidency account_before = residency;
    struct Undo {
      Impl& self;
      std::vector<Registration>& regs;
      WeightResidency& account_before;
      decltype(slot) entry;
      bool armed = true;
      ~Undo() {
        if (!armed) return;
        for (const Registration& r : regs) {
          if (r.ptr == 0) continue;
          try {
            static_cast<void>(self.backend->unregister_host(r.ptr, r.length, HostAccess::read_only));
          } catch (...) {  // its error's text found no memory either: nothing to tell it to
          }
        }
        self.registrations.erase(entry);
        self.residency = std::move(account_before);
      }
    } undo{*this, regs, account_before, slot};
    std::string why;
    bool by_policy = false;  // a rule of ballast's, not a failure: residency() says it, the log does not
    const Capabilities& caps = backend->capabilities();
    auto whole = store->mmap_full_bytes(mapping);
    const std::vector<ByteRange>& refs = referenced_ranges(mapping);
    if (!caps.host_registration || !caps.read_only_registration) {
      // Mappings are read-only: a backend that cannot register read-only
      // memory is not asked to.
      why = std::string(caps.host_registration ? "backend cannot register read-only host memory"
                                               : "backend cannot register host memory") +
            (caps.host_registration_note.empty() ? std::string() : ": " + caps.host_registration_note);
    } else if (!caps.guarded_host_reads && !options.register_unguarded) {
      by_policy = true;
      why = "the backend reads registered host memory in threads that block SIGBUS, so a truncation of the file "
            "under the registration could not be answered and would kill the process (set "
            "DeviceWeightsOptions::register_unguarded to register anyway)";
    } else if (!whole || whole->empty() || refs.empty()) {
      why = "mapping has no referenced bytes to register";
    } else {
      device::RegistrationPlanInput in;
      // Each weight's own range, not their union: a split for the size
      // limit must fall between two weights, and weights stored back to
      // back are one referenced range.
      for (const auto& [id, w] : store->weights())
        if (w.is_external())
          if (auto p = store->external_mmap_provenance(w); p && p->mapping == mapping && p->length != 0)
            in.referenced.push_back({p->offset, p->length});
      std::sort(in.referenced.begin(), in.referenced.end(),
                [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
      in.file_size = whole->size();
      in.base_address = reinterpret_cast<std::uintptr_t>(whole->data());
      in.import_alignment = caps.import_alignment;
      const long page = ::sysconf(_SC_PAGESIZE);
      in.page_size = page > 0 ? static_cast<std::uint64_t>(page) : 4096;
      in.split_gap = options.split_gap_bytes;
      in.max_range = backend->capabilities().max_single_allocation;
      bool any = false;
      std::size_t next_ref = 0;  // both sorted: each referenced range lies inside one planned range
      const std::vector<ByteRange> planned = device::plan_registrations(in);
      regs.reserve(planned.size());  // filing a registration once made allocates nothing
      for (const ByteRange& r : planned) {
        std::uint64_t inside = 0;
        for (; next_ref < refs.size() && refs[next_ref].offset < r.offset + r.length; ++next_ref) {
          const ByteRange& x = refs[next_ref];
          const std::uint64_t lo = std::max(x.offset, r.offset);
          const std::uint64_t hi = std::min(x.offset + x.length, r.offset + r.length);
          if (lo < hi) inside += hi - lo;
        }
        // A range split off for the size limit may share its first referenced
        // range with the one before: count that one in both.
        if (next_ref > 0 && refs[next_ref - 1].offset + refs[next_ref - 1].length > r.offset + r.length) --next_ref;
        const auto file = store::StoreAccess::mapping(*store, mapping);
        auto arm = std::make_shared<store::RegistrationArm>(whole->data() + r.offset, static_cast<std::size_t>(r.length),
                                                            file ? file->poison_flag() : nullptr);
        Result<DevicePtr> reg = make_error(ErrorCode::unavailable,
                                           "all " + std::to_string(store::RegistrationArm::kSlots) +
                                               " guards for zero-copy registrations are in use");
        if (arm->armed()) reg = backend->register_host(whole->data() + r.offset, r.length, HostAccess::read_only);
        if (reg.ok()) {
          regs.push_back({r.offset, r.length, *reg, std::move(arm)});
          any = true;
          residency.registered_ranges += 1;
          residency.registered_bytes += r.length;
          residency.referenced_bytes += inside;
        } else {
          regs.push_back({r.offset, r.length, 0});
          if (why.empty())
            why = "registering " + store->mapping_path(mapping).value_or("?").string() + " [" +
                  std::to_string(r.offset) + ", " + std::to_string(r.offset + r.length) +
                  ") failed: " + reg.error().to_string();
        }
      }
      if (any) {
        residency.registered_files += 1;
        residency.mapped_bytes += whole->size();
      }
    }
    if (!why.empty()) {
      residency.fallback_files += 1;
      if (!by_policy)
        log_message(LogLevel::warning, "device weights",
                    "uploading the weights of " + store->mapping_path(mapping).value_or("?").string() +
                        " instead of registering the mapping: " + why);
      if (residency.fallback_reason.empty()) residency.fallback_reason = why;
    }
    slot->second = std::move(regs);
    undo.armed = false;
    return slot->second;
  }

  // The registration wholly containing [offset, offset + length); nullptr
  // when none does (a weight added to the store after its file was planned,
  // or an empty one): that weight is uploaded.
  static const Registration* containing(const std::vector<Registration>& regs, std::uint64_t offset,
                                        std::uint64_t length) {
    auto it = std::upper_bound(regs.begin(), regs.end(), offset,
                               [](std::uint64_t o, const Registration& r) { return o < r.offset; });
    if (it == regs.begin()) return nullptr;
    const Registration& r = *std::prev(it);
    if (length == 0 || offset - r.offset >= r.length || length > r.length - (offset - r.offset)) return nullptr;
    return &r;
  }
};

DeviceWeights::DeviceWeights(GpuBackend& backend, const WeightStore& store, std::string label)
    : DeviceWeights(backend, store, DeviceWeightsOptions{}, std::move(label)) {}

DeviceWeights::DeviceWeights(GpuBackend& backend, const WeightStore& store, const DeviceWeightsOptions& options,
                             std::string label)
    : impl_(std::make_unique<Impl>()) {
  impl_->backend = &backend;
  impl_->store = &store;
  impl_->label = std::move(label);
  impl_->options = options;
}

// Backstop, same rule as TeardownHost(gpu): an engine that forgets
// release() must not leave registrations and uploads live on the backend.
// Like the host, this needs the backend alive, which the documented
// lifetime rule already requires (destroy DeviceWeights before its backend);
// failures have no one to report to here, so call release() to see them.
DeviceWeights::~DeviceWeights() {
  if (impl_) static_cast<void>(release(*impl_->backend));
}

std::string DeviceWeights::label() const { return impl_->label; }

std::uint64_t DeviceWeights::epoch() const noexcept { return impl_->epoch.load(std::memory_order_acquire); }

WeightResidency DeviceWeights::residency() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->residency;
}

namespace {
// Host memory ran out (std::bad_alloc caught): an error whose message fits
// std::string's inline buffer, so making it allocates nothing.
Error out_of_host_memory() noexcept {
  Error e;
  e.code = ErrorCode::out_of_memory;
  e.message = "host memory";
  return e;
}
}  // namespace

// An error value, never an exception: locate() leaves nothing behind when
// host memory runs out (a registration ended, an upload freed).
Result<DevicePtr> DeviceWeights::resolve(ValueId id) {
  try {
    BALLAST_ASSIGN_OR_RETURN(auto ptr, locate(id, /*may_upload=*/true));
    return *ptr;
  } catch (const std::bad_alloc&) {
    return out_of_host_memory();
  }
}

Result<std::optional<DevicePtr>> DeviceWeights::resolve_in_place(ValueId id) {
  try {
    return locate(id, /*may_upload=*/false);
  } catch (const std::bad_alloc&) {
    return out_of_host_memory();
  }
}

Result<std::optional<DevicePtr>> DeviceWeights::locate(ValueId id, bool may_upload) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  auto w = m.store->weights().find(id);
  if (auto it = m.resolved.find(id); it != m.resolved.end()) {
    if (!may_upload && !it->second.in_place) return std::optional<DevicePtr>();
    // A weight read in place is read from its file's pages by whoever uses
    // the pointer: checked on every call (one fstat). An upload is already
    // on the device and no longer depends on the file.
    if (it->second.in_place && w != m.store->weights().end())
      if (Status s = m.store->check_unchanged(w->second); !s.ok()) return s.error();
    return std::optional<DevicePtr>(it->second.ptr);
  }
  if (w == m.store->weights().end())
    return make_error(ErrorCode::not_found, "no weight with value id " + std::to_string(id.index));
  const WeightRef& ref = w->second;
  if (!m.store->bytes(ref)) {
    Error e = make_error(ErrorCode::out_of_bounds, "weight bytes are not mapped or out of bounds");
    if (ref.external) {
      e.file = ref.external->resolved().string();
      e.offset = ref.external->offset;
    }
    return e;
  }
  // Before anything reads or registers the file: is it still the one opened?
  if (Status s = m.store->check_unchanged(ref); !s.ok()) return s.error();
  DevicePtr ptr = 0;
  bool read_in_place = false;
  if (ref.is_external()) {
    auto prov = m.store->external_mmap_provenance(ref);
    if (prov) {
      const Impl::Registration* reg = Impl::containing(m.registrations_for(prov->mapping), prov->offset, prov->length);
      // A weight at an offset its kernels cannot read in place (not aligned
      // to its element size) is uploaded instead, and counted.
      if (reg != nullptr && reg->ptr != 0) {
        const DevicePtr in_place = reg->ptr + (prov->offset - reg->offset);
        if (m.backend->capabilities().unaligned_operands || in_place % derivation_operand_alignment(ref.dtype) == 0) {
          ptr = in_place;
          read_in_place = true;
        } else if (m.misaligned.insert(id).second) {
          m.residency.misaligned_uploads += 1;  // counted once, whoever uploads it
        }
      }
    }
  }
  // Truncated while it was registered: the backend may have read zeros.
  if (read_in_place)
    if (Status s = m.store->check_unchanged(ref); !s.ok()) return s.error();
  if (ptr == 0 && !may_upload) return std::optional<DevicePtr>();  // the caller uploads it
  if (ptr == 0) {
    // Two names for one byte range (tied embeddings, a deduplicated blob)
    // are one upload, as they are one registration when read in place: the
    // memo then shares their derivations on every path alike.
    const Impl::BytesKey key = Impl::bytes_key(*m.store, ref);
    if (auto same = m.uploaded_by_bytes.find(key); same != m.uploaded_by_bytes.end()) {
      ptr = same->second;
    } else {
      // Its entry first (host memory may run out), filled once uploaded:
      // an upload is never made without being found by the next caller.
      const auto slot = m.uploaded_by_bytes.emplace(key, 0).first;
      Result<DevicePtr> up = make_error(ErrorCode::internal, "not uploaded");
      try {
        up = m.upload(id, ref);
      } catch (...) {
        m.uploaded_by_bytes.erase(slot);
        throw;
      }
      if (!up.ok()) {
        m.uploaded_by_bytes.erase(slot);
        return std::move(up.error()).with_context("making weight visible to " + m.backend->info().backend);
      }
      ptr = slot->second = *up;
    }
  }
  m.resolved.emplace(id, Impl::Resolved{ptr, read_in_place});
  return std::optional<DevicePtr>(ptr);
}

Released DeviceWeights::release(GpuBackend& backend) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  Released out;
  // Every upload and registration is the backend's it was made on: freed
  // on another, each would be refused (or, where two devices hand out the
  // same addresses, free someone else's), and clearing the lists would
  // then lose them. Refused whole instead, nothing touched.
  if (&backend != m.backend) {
    out.status = device::foreign_backend(m.label, *m.backend, backend);
    return out;
  }
  // The first failure is the report's, named by the weight's file and
  // offset (the store knows no names); later ones are counted in it.
  // Naming is a courtesy: without host memory for it, the backend's error
  // and the counts still stand.
  auto note_failure = [&out](Status s, const auto& describe) {
    out.failed_frees += 1;
    if (!out.status.ok()) return;
    try {
      describe(s.error());
    } catch (const std::bad_alloc&) {
    }
    out.status = std::move(s);
  };
  for (const Impl::Upload& u : m.uploads) {
    if (Status s = backend.free(u.ptr); s.ok()) {
      out.bytes_freed += u.bytes;
      out.allocations_freed += 1;
    } else {
      note_failure(std::move(s), [&](Error& e) {
        const std::string what = "freeing the " + std::to_string(u.bytes) + "-byte upload of ";
        auto w = m.store->weights().find(u.id);
        if (w == m.store->weights().end() || !w->second.is_external()) {
          e.with_context(what + "the inline weight with value id " + std::to_string(u.id.index));
          return;
        }
        const ExternalLocation& at = *w->second.external;
        if (e.file.empty()) {
          e.file = at.resolved().string();
          e.offset = at.offset;
        }
        e.with_context(what + "the weight at offset " + std::to_string(at.offset) + " of " + at.resolved().string());
      });
    }
  }
  for (auto& [mapping, regs] : m.registrations) {
    for (const Impl::Registration& r : regs) {
      if (r.ptr == 0) continue;
      // By pointer, size and access: another DeviceWeights (or Residency)
      // over this store may hold a registration from the same start with
      // another length, which a pointer alone would end instead of this one.
      if (Status s = backend.unregister_host(r.ptr, r.length, HostAccess::read_only); !s.ok())
        note_failure(std::move(s), [&, mapping = mapping](Error& e) {
          const std::string path = m.store->mapping_path(mapping).value_or("?").string();
          if (e.file.empty()) e.file = path;
          e.with_context("unregistering the mapping of " + path);
        });
    }
  }
  if (out.failed_frees > 1) {
    try {
      out.status.error().message += " (and " + std::to_string(out.failed_frees - 1) + " more refused free" +
                                    (out.failed_frees == 2 ? ")" : "s)");
    } catch (const std::bad_alloc&) {
    }
  }
  m.uploads.clear();
  m.uploaded_by_bytes.clear();
  m.registrations.clear();
  m.referenced.reset();
  m.resolved.clear();
  m.residency = {};
  // Pointers resolved from now on are new ones, whatever their addresses.
  m.epoch.store(next_epoch(), std::memory_order_release);
  return out;
}

}  // namespace ballast
