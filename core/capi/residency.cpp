// Residency: the one C++ stack the C API puts weights on a device with
// (upload, zero_copy or paged under a budget; derived values built on
// demand and memoized). The options struct maps field for field onto
// ResidencyOptions, zero meaning the C++ default.
#include "capi/objects.hpp"

#include <ballast/derivation_kinds.hpp>

#include <chrono>
#include <mutex>
#include <shared_mutex>  // std::shared_lock, over capi::Gate

using namespace ballast;
using namespace ballast::capi;

namespace {

ballast_status* to_options(const ballast_residency_options& in, const ModelObject& model, ResidencyOptions& out) {
  switch (in.strategy) {
    case BALLAST_ZERO_COPY: out.strategy = ResidencyStrategy::zero_copy; break;
    case BALLAST_UPLOAD: out.strategy = ResidencyStrategy::upload; break;
    case BALLAST_PAGED: out.strategy = ResidencyStrategy::paged; break;
    default:
      return invalid_argument("invalid_argument: strategy " + std::to_string(in.strategy) +
                              " is none of ballast_strategy");
  }
  if (in.budget_bytes != 0) out.budget_bytes = in.budget_bytes;
  if (in.plan != nullptr) {
    ballast_status* e = nullptr;
    auto plan = lookup<PlanObject>(in.plan, Kind::plan, &e);
    if (!plan) return e;
    if (plan->model.get() != &model)
      return invalid_argument("invalid_argument: options.plan was planned for another model");
    out.derivations = plan->entries;
  }
  if (in.no_derivations != 0) {
    out.policy = DerivationPolicy::none();
  } else if (in.kinds != 0) {
    constexpr std::uint32_t kKnown = (std::uint32_t{1} << kDerivationCount) - 1;
    if ((in.kinds & ~kKnown) != 0)
      return invalid_argument("invalid_argument: options.kinds " + std::to_string(in.kinds) + " sets bits past the " +
                              std::to_string(kDerivationCount) +
                              " derivation kinds this library has (ballast_derivation_kind_name() names them)");
    out.policy.kinds = in.kinds;
  }
  if (in.group_by_layer != nullptr) out.group_by = group_by_layer(in.group_by_layer);
  if (in.override_count > 0 && in.overrides == nullptr)
    return invalid_argument("invalid_argument: override_count is " + std::to_string(in.override_count) +
                            " but overrides is NULL");
  for (std::size_t i = 0; i < in.override_count; ++i) {
    const ballast_override& o = in.overrides[i];
    if (o.weight == nullptr) return invalid_argument("invalid_argument: overrides[" + std::to_string(i) + "].weight is NULL");
    auto id = model.model.value_id(o.weight);
    if (!id || model.model.weight(o.weight) == nullptr)
      return make_status(BALLAST_E_NOT_FOUND, "not_found: overrides[" + std::to_string(i) + "] names '" +
                                                  std::string(o.weight) + "', which is not a weight of the model");
    ResidencyStrategy s{};
    switch (o.strategy) {
      case BALLAST_ZERO_COPY: s = ResidencyStrategy::zero_copy; break;
      case BALLAST_UPLOAD: s = ResidencyStrategy::upload; break;
      case BALLAST_PAGED: s = ResidencyStrategy::paged; break;
      default:
        return invalid_argument("invalid_argument: overrides[" + std::to_string(i) + "] for '" + std::string(o.weight) +
                                "': strategy " + std::to_string(o.strategy) + " is none of ballast_strategy");
    }
    out.overrides.emplace_back(*id, s);
  }
  return nullptr;
}

// A residency handle's object, shared-locked and not yet released.
struct Using {
  std::shared_ptr<ResidencyObject> object;
  std::shared_lock<Gate> lock;
};

ballast_status* use(const ballast_residency* handle, Using& u) {
  ballast_status* e = nullptr;
  u.object = lookup<ResidencyObject>(handle, Kind::residency, &e);
  if (!u.object) return e;
  u.lock = std::shared_lock(u.object->gate);
  if (u.object->released) return invalid_argument("invalid_argument: the residency was released");
  return nullptr;
}

// Drops the caller's share of the gate first: a PinObject takes the gate
// itself to unpin, and one destroyed here (an allocation failing below)
// must not take it a second time on this thread.
ballast_status* hand_out_pin(Using& u, std::vector<Pinned> members, std::vector<std::string> names, ballast_pin** out,
                             std::vector<const WeightRef*> in_place = {}) {
  in_place.resize(members.size(), nullptr);
  u.lock.unlock();
  auto pin = std::make_shared<PinObject>();
  pin->owner = u.object;
  pin->members = std::move(members);
  pin->names = std::move(names);
  pin->in_place = std::move(in_place);
  *out = static_cast<ballast_pin*>(insert_handle(Kind::pin, std::move(pin)));
  return nullptr;
}

// The weight `id` when the residency reads it in place (zero_copy, as carried
// out: pinned, so registered), else nullptr (PinObject::in_place).
const WeightRef* read_in_place(const ResidencyObject& r, std::optional<ValueId> id) {
  if (!id || r.residency->strategy_of(*id) != ResidencyStrategy::zero_copy) return nullptr;
  const auto& weights = r.model->model.store().weights();
  auto it = weights.find(*id);
  return it == weights.end() ? nullptr : &it->second;  // one not in a mapped file always checks ok
}

// `plan`, checked to be a plan of the residency's model.
ballast_status* plan_of(const ResidencyObject& r, const ballast_plan* plan, std::shared_ptr<PlanObject>& p) {
  ballast_status* e = nullptr;
  p = lookup<PlanObject>(plan, Kind::plan, &e);
  if (!p) return e;
  if (p->model != r.model) return invalid_argument("invalid_argument: the plan belongs to another model");
  return nullptr;
}

// ...and `index` one of its entries.
ballast_status* entry_of(const ResidencyObject& r, const ballast_plan* plan, std::size_t index,
                         std::shared_ptr<PlanObject>& p) {
  if (auto* e = plan_of(r, plan, p)) return e;
  if (auto* bad = check_index(index, p->entries.size(), "plan entry")) return bad;
  return nullptr;
}

ballast_status* to_load_options(const ballast_load_options& in, ResidencyLoadOptions& out) {
  switch (in.engine) {
    case BALLAST_READ_AUTO: out.read.engine = ReadEngine::automatic; break;
    case BALLAST_READ_IO_URING: out.read.engine = ReadEngine::io_uring; break;
    case BALLAST_READ_THREADS: out.read.engine = ReadEngine::threads; break;
    default:
      return invalid_argument("invalid_argument: options.engine " + std::to_string(in.engine) +
                              " is none of ballast_read_engine");
  }
  switch (in.cache) {
    case BALLAST_CACHE_AUTO: out.read.cache = CachePolicy::automatic; break;
    case BALLAST_CACHE_DROP: out.read.cache = CachePolicy::drop; break;
    case BALLAST_CACHE_KEEP: out.read.cache = CachePolicy::keep; break;
    default:
      return invalid_argument("invalid_argument: options.cache " + std::to_string(in.cache) +
                              " is none of ballast_cache_policy");
  }
  // Zero: the C++ default; past a cap, read_plan() says which.
  if (in.queue_depth != 0) out.read.queue_depth = in.queue_depth;
  if (in.staging_buffers != 0) out.read.staging_buffers = in.staging_buffers;
  if (in.chunk_bytes != 0) out.read.chunk_bytes = in.chunk_bytes;
  out.read.direct_io = in.direct_io != 0;
  out.read_cached = in.read_cached != 0;
  out.populate_threads = in.populate_threads;
  if (in.populate_piece_bytes != 0) out.populate_piece_bytes = in.populate_piece_bytes;
  return nullptr;
}

std::int32_t engine_code(ReadEngine e) {
  return e == ReadEngine::io_uring  ? BALLAST_READ_IO_URING
         : e == ReadEngine::threads ? BALLAST_READ_THREADS
                                    : BALLAST_READ_AUTO;
}

}  // namespace

extern "C" {

ballast_status* ballast_residency_create(ballast_backend* backend, const ballast_model* model,
                                         const ballast_residency_options* options, ballast_residency** out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output handle");
    if (e) return e;
    auto b = lookup<BackendObject>(backend, Kind::backend, &e);
    if (!b) return e;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    ballast_residency_options in;
    if (!capi::read_in(options, in))
      return invalid_argument("invalid_argument: options.size is not set (BALLAST_INIT), or cuts a field");
    ResidencyOptions cxx;
    if ((e = to_options(in, *m, cxx))) return e;
    auto created = Residency::create(*b->backend, m->model, cxx);
    if (!created.ok()) return from_error(created.error());
    auto object = std::make_shared<ResidencyObject>();
    object->backend = std::move(b);
    object->model = std::move(m);
    object->residency = std::move(*created);
    *out = static_cast<ballast_residency*>(insert_handle(Kind::residency, std::move(object)));
    return nullptr;
  });
}

ballast_status* ballast_residency_free(ballast_residency* residency) {
  if (residency == nullptr) return nullptr;
  return guarded([&]() -> ballast_status* {
    return remove_handle(residency, Kind::residency) ? nullptr : bad_handle(Kind::residency, residency);
  });
}

ballast_status* ballast_residency_release(ballast_residency* residency, ballast_teardown* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto r = lookup<ResidencyObject>(residency, Kind::residency, &e);
    if (!r) return e;
    std::unique_lock lock(r->gate);
    Released released = r->residency->release(*r->backend->backend);
    r->released = true;
    lock.unlock();
    if (out != nullptr) {
      ballast_teardown t{};
      t.bytes_freed = released.bytes_freed;
      t.allocations_freed = released.allocations_freed;
      t.failed_frees = released.failed_frees;
      if ((e = write_out(t, out))) return e;
    }
    return from_status(released.status);
  });
}

ballast_status* ballast_residency_plan(const ballast_residency* residency, ballast_plan** out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output handle")) return e;
    Using u;
    if (auto* e = use(residency, u)) return e;
    const auto plan = u.object->residency->plan();
    *out = static_cast<ballast_plan*>(
        make_plan_handle(u.object->model, std::vector<PlannedDerivation>(plan.begin(), plan.end())));
    return nullptr;
  });
}

ballast_status* ballast_residency_group_count(const ballast_residency* residency, size_t* out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output")) return e;
    Using u;
    if (auto* e = use(residency, u)) return e;
    *out = u.object->residency->groups().size();
    return nullptr;
  });
}

ballast_status* ballast_residency_stats_get(const ballast_residency* residency, ballast_residency_stats* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto r = lookup<ResidencyObject>(residency, Kind::residency, &e);
    if (!r) return e;
    std::shared_lock lock(r->gate);  // stats stay readable after release
    const ResidencyStats s = r->residency->stats();
    ballast_residency_stats c{};
    c.budget_bytes = s.budget_bytes;
    c.device_bytes = s.device_bytes;
    c.peak_device_bytes = s.peak_device_bytes;
    c.pinned_bytes = s.pinned_bytes;
    c.registered_bytes = s.registered_bytes;
    c.uploaded_bytes = s.uploaded_bytes;
    c.paged_in_bytes = s.paged_in_bytes;
    c.page_ins = s.page_ins;
    c.source_evictions = s.source_evictions;
    c.derived_evictions = s.derived_evictions;
    c.derived_builds = s.derived_builds;
    c.derived_rebuilds = s.derived_rebuilds;
    c.prefetches = s.prefetches;
    c.prefetches_skipped = s.prefetches_skipped;
    c.prefetches_failed = s.prefetches_failed;
    c.stuck_bytes = s.stuck_bytes;
    return write_out(c, out);
  });
}

ballast_status* ballast_residency_pin_derivation(ballast_residency* residency, const ballast_plan* plan, size_t index,
                                                 ballast_pin** out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output handle")) return e;
    Using u;
    if (auto* e = use(residency, u)) return e;
    std::shared_ptr<PlanObject> p;
    if (auto* e = entry_of(*u.object, plan, index, p)) return e;
    const PlannedDerivation& entry = p->entries[index];
    auto pinned = u.object->residency->pin(entry);
    if (!pinned.ok()) return from_error(pinned.error());
    std::vector<Pinned> members;
    members.push_back(std::move(*pinned));
    std::string name = std::string(derivation_name(entry.kind())) + " of '" + echo_limited(entry.weight) + "'" +
                       (entry.node.empty() ? "" : " for node '" + echo_limited(entry.node) + "'");
    return hand_out_pin(u, std::move(members), {std::move(name)}, out);
  });
}

ballast_status* ballast_residency_pin_weight(ballast_residency* residency, const char* weight, ballast_pin** out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output handle")) return e;
    if (weight == nullptr) return invalid_argument("invalid_argument: the weight name is NULL");
    Using u;
    if (auto* e = use(residency, u)) return e;
    auto pinned = u.object->residency->pin(std::string_view(weight));
    if (!pinned.ok()) return from_error(pinned.error());
    std::vector<Pinned> members;
    members.push_back(std::move(*pinned));
    const WeightRef* in_place = read_in_place(*u.object, u.object->model->model.value_id(weight));
    return hand_out_pin(u, std::move(members), {"weight '" + echo_limited(weight) + "'"}, out, {in_place});
  });
}

ballast_status* ballast_residency_pin_group(ballast_residency* residency, size_t index, uint32_t wait_ms,
                                            ballast_pin** out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output handle")) return e;
    Using u;
    if (auto* e = use(residency, u)) return e;
    const auto groups = u.object->residency->groups();
    if (auto* bad = check_index(index, groups.size(), "group")) return bad;
    auto set = u.object->residency->pin(groups[index], std::chrono::milliseconds(wait_ms));
    if (!set.ok()) return from_error(set.error());
    std::vector<Pinned> members = std::move(set->derived);
    std::vector<const WeightRef*> in_place(members.size(), nullptr);
    for (Pinned& w : set->weights) members.push_back(std::move(w));
    for (ValueId id : groups[index].weights) in_place.push_back(read_in_place(*u.object, id));
    std::vector<std::string> names;
    for (std::size_t i = 0; i < members.size(); ++i)
      names.push_back("member " + std::to_string(i) + " of group " + std::to_string(index));
    return hand_out_pin(u, std::move(members), std::move(names), out, std::move(in_place));
  });
}

ballast_status* ballast_residency_derive_all(ballast_residency* residency, const ballast_plan* plan,
                                             ballast_progress_fn progress, void* user) {
  return guarded([&]() -> ballast_status* {
    Using u;
    if (auto* e = use(residency, u)) return e;
    std::shared_ptr<PlanObject> p;
    if (auto* e = plan_of(*u.object, plan, p)) return e;
    const std::size_t n = p->entries.size();
    for (std::size_t i = 0; i < n; ++i) {
      // Pin to build (or find) the value, unpin at once: it stays resident
      // until paging needs its room.
      auto pinned = u.object->residency->pin(p->entries[i]);
      if (!pinned.ok()) return from_error(pinned.error());
      pinned->reset();
      if (progress != nullptr) {
        // Called with this call's share of the gate dropped: the callback
        // may call back into ballast on this residency (stats_get, a pin),
        // and a new use waits behind a waiting release, which itself waits
        // for this share: held here, the two would wait for each other for
        // ever. A release that ran meanwhile ends the walk as any later
        // call's use of a released residency does.
        u.lock.unlock();
        progress(user, i + 1, n);
        u.lock.lock();
        if (u.object->released) return invalid_argument("invalid_argument: the residency was released");
      }
    }
    return nullptr;
  });
}

ballast_status* ballast_residency_prefetch(ballast_residency* residency, const ballast_plan* plan, size_t index) {
  return guarded([&]() -> ballast_status* {
    Using u;
    if (auto* e = use(residency, u)) return e;
    std::shared_ptr<PlanObject> p;
    if (auto* e = entry_of(*u.object, plan, index, p)) return e;
    u.object->residency->prefetch(std::span<const PlannedDerivation>(&p->entries[index], 1));
    return nullptr;
  });
}

ballast_status* ballast_residency_prefetch_group(ballast_residency* residency, size_t index) {
  return guarded([&]() -> ballast_status* {
    Using u;
    if (auto* e = use(residency, u)) return e;
    const auto groups = u.object->residency->groups();
    if (auto* bad = check_index(index, groups.size(), "group")) return bad;
    u.object->residency->prefetch(groups[index]);
    return nullptr;
  });
}

ballast_status* ballast_residency_set_budget(ballast_residency* residency, uint64_t bytes) {
  return guarded([&]() -> ballast_status* {
    Using u;
    if (auto* e = use(residency, u)) return e;
    return from_status(u.object->residency->set_budget(bytes));
  });
}

ballast_status* ballast_residency_wait_prefetches(ballast_residency* residency) {
  return guarded([&]() -> ballast_status* {
    Using u;
    if (auto* e = use(residency, u)) return e;
    u.object->residency->wait_for_prefetches();
    return nullptr;
  });
}

ballast_status* ballast_residency_load(ballast_residency* residency, const ballast_load_options* options,
                                       ballast_load_report* out) {
  return guarded([&]() -> ballast_status* {
    ballast_load_options in;
    if (!capi::read_in(options, in))
      return invalid_argument("invalid_argument: options.size is not set (BALLAST_INIT), or cuts a field");
    if (out != nullptr && out->size < sizeof(std::size_t))
      return invalid_argument("invalid_argument: the report's size is not set (BALLAST_INIT)");
    ResidencyLoadOptions cxx;
    if (auto* e = to_load_options(in, cxx)) return e;
    Using u;
    if (auto* e = use(residency, u)) return e;
    std::lock_guard one_at_a_time(u.object->load_mutex);
    auto loaded = u.object->residency->load(cxx);
    if (!loaded.ok()) return from_error(loaded.error());
    if (out == nullptr) return nullptr;
    const ResidencyLoadReport& r = *loaded;
    ballast_load_report c{};
    c.planned_bytes = r.planned_bytes;
    c.planned_ranges = r.planned_ranges;
    c.planned_files = r.planned_files;
    c.read_bytes = r.read.bytes;
    c.io_bytes = r.read.io_bytes;
    c.reads = r.read.reads;
    c.read_files = r.read.files;
    c.direct_files = r.read.direct_files;
    c.mapped_files = r.read.mapped_files;
    c.staging_bytes = r.read.staging_bytes;
    c.peak_staging_in_use = r.read.peak_staging_in_use;
    c.sources_read = r.sources_read;
    c.sources_cached = r.sources_cached;
    c.cached_bytes = r.cached_bytes;
    c.inline_sources = r.inline_sources;
    c.zero_copy_weights = r.zero_copy_weights;
    c.populated_bytes = r.populated_bytes;
    c.zero_copy_uploads = r.zero_copy_uploads;
    c.derived_built = r.derived_built;
    c.already_resident = r.already_resident;
    c.left_for_demand = r.left_for_demand;
    c.left_bytes = r.left_bytes;
    c.engine = r.read.reads == 0 ? BALLAST_READ_AUTO : engine_code(r.read.engine);  // nothing read: none ran
    c.cache = r.cache == CachePolicy::keep ? BALLAST_CACHE_KEEP : BALLAST_CACHE_DROP;
    c.read_seconds = r.read.seconds;
    c.seconds = r.seconds;
    return write_out(c, out);
  });
}

}  // extern "C"
