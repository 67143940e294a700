// derive_weight() and derive_weights(): plan -> operands -> outputs -> launch ->
// synchronize -> memoize, freeing what was allocated on every failure.
#include <ballast/derive.hpp>

#include "base/hex.hpp"
#include "derive/check_planned.hpp"
#include "derive/build.hpp"
#include "derive/transposed_source.hpp"
#include "memo/memo_map.hpp"

#include <algorithm>
#include <array>
#include <new>
#include <optional>
#include <unordered_map>
#include <utility>

namespace ballast {
namespace {

std::string where(const PlannedDerivation& p) {
  std::string out = "deriving " + std::string(derivation_name(p.kind())) + " of '" + p.weight + "'";
  if (!p.node.empty()) out += " for node '" + p.node + "'";
  return out;
}


Result<DevicePtr> resolve(const DeriveContext& ctx, ValueId id, const char* role) {
  auto r = ctx.sources.resolve(id);
  if (!r.ok()) r.error().with_context("resolving " + std::string(role) + " '" + std::string(ctx.model.value_name(id)) + "'");
  return r;
}

// After the wait: the kernels read every in-place (zero-copy) operand from
// its file's pages, and a truncation meanwhile made them read zeros (the
// registration is armed: docs/reliability.md). Resolving again re-checks
// each such operand's file (one stat, and the guard's poison); uploads and
// a transposed copy are device memory and need nothing.
using Operands = std::array<std::optional<ValueId>, 3>;  // source_operands(): weight, scales, zero points
Status recheck_operands(const DeriveContext& ctx, const Operands& operands) {
  static constexpr const char* kRoles[] = {"weight", "scales", "zero points"};
  for (std::size_t i = 0; i < operands.size(); ++i)
    if (operands[i]) BALLAST_RETURN_IF_ERROR(resolve(ctx, *operands[i], kRoles[i]));
  return Status();
}

// The scales and zero points of an int4 launch (the source is the caller's).
Status resolve_int4_operands(const DeriveContext& ctx, const PlannedDerivation& p, DerivationLaunch& l) {
  if (p.scales) {
    BALLAST_ASSIGN_OR_RETURN(auto s, resolve(ctx, *p.scales, "scales"));
    l.scales = s;
  }
  if (p.zero_points) {
    BALLAST_ASSIGN_OR_RETURN(auto z, resolve(ctx, *p.zero_points, "zero points"));
    l.zero_point = z;
  }
  return Status();
}

void free_quietly(GpuBackend& gpu, DevicePtr p) noexcept {
  try {
    if (p != 0) static_cast<void>(gpu.free(p));
  } catch (...) {  // describing the refusal ran out of memory: the free itself is done or refused
  }
}

// Frees what a failing derivation allocated. A free the device refuses (a
// lost device refuses them all) leaves that allocation live, counted by the
// backend and owned by no one: the error then says so and names each one,
// so an engine can account for what the backend's counters still show.
class Cleanup {
 public:
  explicit Cleanup(GpuBackend& gpu) noexcept : gpu_(gpu) {}

  void free(DevicePtr p) {
    if (p == 0) return;
    Status s = gpu_.free(p);
    if (s.ok()) return;
    kept_.push_back(p);
    if (first_.ok()) first_ = std::move(s);
  }

  // `failure`, plus what could not be freed.
  Status finish(Status failure) && {
    if (kept_.empty() || failure.ok()) return failure;
    std::string list;
    for (std::size_t i = 0; i < kept_.size(); ++i) list += (i == 0 ? "" : ", ") + hex(kept_[i]);
    failure.error().message += "; then freeing what it had allocated failed, so " + std::to_string(kept_.size()) +
                               (kept_.size() == 1 ? " allocation stays" : " allocations stay") +
                               " live, owned by no one (" + list + "): " + first_.to_string();
    return failure;
  }

 private:
  GpuBackend& gpu_;
  std::vector<DevicePtr> kept_;
  Status first_;
};

// Frees the outputs of a launch that failed (or whose wait did).
Status release_outputs(GpuBackend& gpu, DerivationLaunch& l, Status failure) {
  Cleanup cleanup(gpu);
  cleanup.free(l.dst);
  cleanup.free(l.dst2);
  l.dst = l.dst2 = 0;
  return std::move(cleanup).finish(std::move(failure));
}

// The memo's output blocks: plain allocations, freed on failure (or named
// when the device refuses to free them).
class Allocations final : public derive::OutputBlocks {
 public:
  explicit Allocations(GpuBackend& gpu) noexcept : gpu_(gpu) {}
  Status obtain(DerivationLaunch& l, const DerivationSizes& sizes) override {
    BALLAST_ASSIGN_OR_RETURN(auto dst, gpu_.allocate(sizes.dst_bytes));
    l.dst = dst;
    if (sizes.dst2_bytes != 0) {
      auto second = gpu_.allocate(sizes.dst2_bytes);
      if (!second.ok()) return release_outputs(gpu_, l, second.status());
      l.dst2 = *second;
    }
    return Status();
  }
  Status give_back(DerivationLaunch& l, const DerivationSizes&, Status failure) override {
    return release_outputs(gpu_, l, std::move(failure));
  }

 private:
  GpuBackend& gpu_;
};

template <class Derived>
Derived value_of(const DerivationLaunch& l, const DerivationSizes& sizes) {
  if constexpr (std::is_same_v<Derived, DerivedPtr>) {
    return DerivedPtr{l.dst, sizes.dst_bytes};
  } else {
    return DerivedPair{{l.dst, sizes.dst_bytes}, {l.dst2, sizes.dst2_bytes}};
  }
}

// One build for the memo: launch, then wait, so that an asynchronous kernel
// failure is an error here and never a memoized value.
template <class Derived>
Result<Derived> build(const DeriveContext& ctx, const PlannedDerivation& p, DerivationLaunch l,
                      const DerivationSizes& sizes) {
  Allocations blocks(ctx.backend);
  // (No context of its own: derive_weight() adds where(p) outside the memo's.)
  BALLAST_RETURN_IF_ERROR(
      derive::build_one(ctx.backend, l, sizes, blocks, [&] { return recheck_operands(ctx, source_operands(p)); }));
  return value_of<Derived>(l, sizes);
}

Result<DerivedValue> derive_unwrapped(const DeriveContext& ctx, const PlannedDerivation& p) {
  BALLAST_RETURN_IF_ERROR(ctx.memo.bind_sources(ctx.sources.epoch(), ctx.backend));
  BALLAST_RETURN_IF_ERROR(derive::check_planned(ctx.model, p));
  DerivationLaunch l = p.launch;
  BALLAST_ASSIGN_OR_RETURN(auto sizes, derivation_sizes(l));
  if (p.of_transposed) {
    BALLAST_ASSIGN_OR_RETURN(auto t, derive_weight(ctx, transposed_source_of(p)));
    l.src = t.first;
  } else {
    BALLAST_ASSIGN_OR_RETURN(auto src, resolve(ctx, p.source, "weight"));
    l.src = src;
  }
  BALLAST_RETURN_IF_ERROR(resolve_int4_operands(ctx, p, l));
  DerivedValue out;
  out.key = DerivationKey::of(l);
  if (derivation_yields_pair(p.kind())) {
    BALLAST_ASSIGN_OR_RETURN(
        auto v, ctx.memo.get_or_build_pair(p.kind(), out.key, [&] { return build<DerivedPair>(ctx, p, l, sizes); }));
    out.first = v.first;
    out.second = v.second;
  } else {
    BALLAST_ASSIGN_OR_RETURN(
        auto v, ctx.memo.get_or_build_ptr(p.kind(), out.key, [&] { return build<DerivedPtr>(ctx, p, l, sizes); }));
    out.first = v;
  }
  return out;
}

// ---------------------------------------------------------------- batch

struct PendingKey {
  Derivation kind;
  DerivationKey key;
  friend bool operator==(const PendingKey&, const PendingKey&) = default;
};
struct PendingHash {
  std::size_t operator()(const PendingKey& k) const noexcept {
    return static_cast<std::size_t>(memo::hash_key(k.key) ^ static_cast<std::uint64_t>(k.kind));
  }
};

// One launched, not yet memoized value and the planned entries waiting on it.
struct Pending {
  PendingKey id;
  DerivationLaunch launch;
  DerivationSizes sizes;
  std::vector<std::size_t> results;
  const PlannedDerivation* origin;  // the plan entry it was launched for (its weight names it)
  Operands operands;                // what the launch read (checked again after the wait)
};

class Wave {
 public:
  Wave(const DeriveContext& ctx, std::vector<DerivedValue>& results, DeriveProgress& progress,
       const DeriveProgressFn& report)
      : ctx_(ctx), results_(results), progress_(progress), report_(report) {}
  // Backstop for an exception (host memory) between add() and discard().
  ~Wave() {
    for (const Pending& p : pending_) {
      free_quietly(ctx_.backend, p.launch.dst);
      free_quietly(ctx_.backend, p.launch.dst2);
    }
  }

  // A wave that failed: waits for what it launched, frees every launch not
  // yet memoized, and returns `failure` saying what it could not free.
  Status discard(Status failure) {
    // A wave that failed while adding (an operand refused after earlier
    // launches went out) still has kernels in flight: they write the
    // outputs about to be freed and read operands the caller may release
    // next (a zero-copy registration, unarmed once unregistered). Wait for
    // them first; a failed wait adds nothing the failure does not say.
    if (!pending_.empty()) static_cast<void>(ctx_.backend.synchronize());
    Cleanup cleanup(ctx_.backend);
    while (!pending_.empty()) {
      Pending& p = pending_.back();
      cleanup.free(p.launch.dst);
      cleanup.free(p.launch.dst2);
      pending_.pop_back();
    }
    index_.clear();
    return std::move(cleanup).finish(std::move(failure));
  }

  // Memoized already: the result now. Otherwise launched (or joined to an
  // identical launch of this wave) and resolved by commit().
  // `origin` is the plan entry `p` was made for (the same one, or the
  // quant_int8 entry whose transposed copy `p` is): it outlives the wave.
  Status add(const PlannedDerivation& p, std::size_t result_index, const PlannedDerivation& origin) {
    DerivationLaunch l = p.launch;
    BALLAST_ASSIGN_OR_RETURN(auto sizes, derivation_sizes(l));
    if (p.of_transposed) {
      BALLAST_ASSIGN_OR_RETURN(auto w, resolve(ctx_, p.source, "weight"));
      DerivationLaunch t = transposed_source_of(p).launch;
      t.src = w;
      auto copy = ctx_.memo.get_ptr(derive::transpose, DerivationKey::of(t));
      if (!copy) return make_error(ErrorCode::internal, "the transposed copy it reads is not memoized");
      l.src = *copy;
    } else {
      BALLAST_ASSIGN_OR_RETURN(auto src, resolve(ctx_, p.source, "weight"));
      l.src = src;
    }
    BALLAST_RETURN_IF_ERROR(resolve_int4_operands(ctx_, p, l));
    PendingKey id{p.kind(), DerivationKey::of(l)};
    if (auto hit = memoized(id)) {
      (*hit).key = id.key;
      results_[result_index] = *hit;
      advance(sizes.src_bytes);
      return Status();
    }
    if (auto it = index_.find(id); it != index_.end()) {
      pending_[it->second].results.push_back(result_index);
      return Status();
    }
    // Everything the launch is filed with is allocated before its blocks
    // are: once launched it is in pending_ (freed by discard() or, on an
    // exception, by ~Wave), and never lost to a bad_alloc in between.
    Pending next{id, l, sizes, {result_index}, &origin, source_operands(p)};
    if (pending_.size() == pending_.capacity()) pending_.reserve(std::max<std::size_t>(16, 2 * pending_.capacity()));
    index_.reserve(index_.size() + 1);  // rehashes only past the load factor
    Allocations blocks(ctx_.backend);
    BALLAST_RETURN_IF_ERROR(derive::start(ctx_.backend, next.launch, sizes, blocks));
    pending_.push_back(std::move(next));
    index_.emplace(id, pending_.size() - 1);
    return Status();
  }

  // One wait for every launch of the wave, then every value memoized.
  Status commit() {
    if (pending_.empty()) return Status();
    // One wait covers every launch of the wave, so a failure cannot be
    // pinned on one of them: the error names them all (the first few), and
    // none is memoized (discard() frees them).
    if (Status s = ctx_.backend.synchronize(); !s.ok()) return std::move(s).with_context(waiting_for());
    Allocations blocks(ctx_.backend);
    for (Pending& p : pending_)  // a failure gives back its own blocks; discard() frees the rest
      BALLAST_RETURN_IF_ERROR(derive::finish(p.launch, p.sizes, blocks, [&] {
        Status s = recheck_operands(ctx_, p.operands);
        return s.ok() ? s : std::move(s).with_context(where(*p.origin));
      }));
    while (!pending_.empty()) {
      Pending& p = pending_.back();
      BALLAST_ASSIGN_OR_RETURN(auto value, insert(p));  // p stays pending: discard() frees it
      for (std::size_t r : p.results) {
        results_[r] = value;
        results_[r].key = p.id.key;
      }
      const std::uint64_t src_bytes = p.sizes.src_bytes;
      const std::size_t joined = p.results.size();
      pending_.pop_back();
      for (std::size_t i = 0; i < joined; ++i) advance(i == 0 ? src_bytes : 0);
    }
    return Status();
  }

 private:
  // "waiting for 9 derivations (transpose of 'a', to_f16 of 'a', quant_int8 of 'b' and 6 more)"
  std::string waiting_for() const {
    constexpr std::size_t kNamed = 3;
    std::string out = "waiting for " + std::to_string(pending_.size()) + " derivation" +
                      (pending_.size() == 1 ? "" : "s") + " (";
    for (std::size_t i = 0; i < pending_.size() && i < kNamed; ++i) {
      if (i != 0) out += i + 1 == pending_.size() ? " and " : ", ";
      out += std::string(derivation_name(pending_[i].id.kind)) + " of '" + pending_[i].origin->weight + "'";
    }
    if (pending_.size() > kNamed) out += " and " + std::to_string(pending_.size() - kNamed) + " more";
    return out + ")";
  }

  std::optional<DerivedValue> memoized(const PendingKey& id) const {
    DerivedValue v;
    if (derivation_yields_pair(id.kind)) {
      auto got = ctx_.memo.get_pair(id.kind, id.key);
      if (!got.ok() || !*got) return std::nullopt;
      v.first = (**got).first;
      v.second = (**got).second;
    } else {
      auto got = ctx_.memo.get_ptr(id.kind, id.key);
      if (!got.ok() || !*got) return std::nullopt;
      v.first = **got;
    }
    return v;
  }

  // Memoizes one finished value; a value another caller memoized first wins
  // and ours is freed.
  Result<DerivedValue> insert(Pending& p) {
    DerivedValue v;
    if (derivation_yields_pair(p.id.kind)) {
      BALLAST_ASSIGN_OR_RETURN(auto ins,
                               ctx_.memo.insert_pair(p.id.kind, p.id.key, value_of<DerivedPair>(p.launch, p.sizes)));
      v.first = ins.memoized.first;
      v.second = ins.memoized.second;
      if (!ins.inserted()) {
        free_quietly(ctx_.backend, p.launch.dst);
        free_quietly(ctx_.backend, p.launch.dst2);
      }
    } else {
      BALLAST_ASSIGN_OR_RETURN(auto ins,
                               ctx_.memo.insert_ptr(p.id.kind, p.id.key, value_of<DerivedPtr>(p.launch, p.sizes)));
      v.first = ins.memoized;
      if (!ins.inserted()) free_quietly(ctx_.backend, p.launch.dst);
    }
    p.launch.dst = p.launch.dst2 = 0;  // memoized or freed: no longer ours
    return v;
  }

  void advance(std::uint64_t bytes) {
    progress_.done += 1;
    progress_.source_bytes_done += bytes;
    if (report_) report_(progress_);
  }

  const DeriveContext& ctx_;
  std::vector<DerivedValue>& results_;
  DeriveProgress& progress_;
  const DeriveProgressFn& report_;
  std::vector<Pending> pending_;
  std::unordered_map<PendingKey, std::size_t, PendingHash> index_;
};

Status with_where(Status s, const PlannedDerivation& p) {
  if (!s.ok()) return std::move(s).with_context(where(p));
  return s;
}

// After a wave's adds (`added`: the first failure, or ok): waits and
// memoizes; on any failure frees what the wave launched and returns why.
Status settle(Wave& wave, Status added, const char* finishing) {
  if (added.ok()) {
    added = wave.commit();
    if (!added.ok()) added = std::move(added).with_context(finishing);
  }
  if (!added.ok()) return wave.discard(std::move(added));
  return added;
}

Result<std::vector<DerivedValue>> derive_all_unwrapped(const DeriveContext& ctx, std::span<const PlannedDerivation> plan,
                                                       const DeriveProgressFn& report) {
  BALLAST_RETURN_IF_ERROR(ctx.memo.bind_sources(ctx.sources.epoch(), ctx.backend));
  for (const PlannedDerivation& p : plan) BALLAST_RETURN_IF_ERROR(derive::check_planned(ctx.model, p));
  std::vector<DerivedValue> results(plan.size());
  DeriveProgress progress;
  progress.total = plan.size();
  for (const PlannedDerivation& p : plan) {
    DerivationLaunch l = p.launch;
    if (auto s = derivation_sizes(l); s.ok()) progress.source_bytes_total += s->src_bytes;
  }
  // Wave 1: everything that reads weights.
  {
    Wave wave(ctx, results, progress, report);
    Status s;
    for (std::size_t i = 0; i < plan.size() && s.ok(); ++i)
      if (!plan[i].of_transposed) s = with_where(wave.add(plan[i], i, plan[i]), plan[i]);
    BALLAST_RETURN_IF_ERROR(settle(wave, std::move(s), "finishing the first wave of derivations"));
  }
  // The transposed copies wave 2 reads; usually planned, hence memoized by
  // now, and launched here only when they were not.
  {
    std::vector<DerivedValue> scratch(1);
    DeriveProgress ignored;
    const DeriveProgressFn silent;  // a named object: Wave keeps a reference
    Wave copies(ctx, scratch, ignored, silent);
    Status s;
    for (std::size_t i = 0; i < plan.size() && s.ok(); ++i) {
      if (!plan[i].of_transposed) continue;
      const PlannedDerivation t = transposed_source_of(plan[i]);
      s = with_where(copies.add(t, 0, plan[i]), t);
    }
    BALLAST_RETURN_IF_ERROR(settle(copies, std::move(s), "finishing the transposed copies"));
  }
  // Wave 2: per-output-channel quantisation of those copies.
  Wave wave(ctx, results, progress, report);
  Status s;
  for (std::size_t i = 0; i < plan.size() && s.ok(); ++i)
    if (plan[i].of_transposed) s = with_where(wave.add(plan[i], i, plan[i]), plan[i]);
  BALLAST_RETURN_IF_ERROR(settle(wave, std::move(s), "finishing the second wave of derivations"));
  return results;
}

}  // namespace

Result<DerivedValue> derive_weight(const DeriveContext& ctx, const PlannedDerivation& planned) {
  try {
    auto r = derive_unwrapped(ctx, planned);
    if (!r.ok()) r.error().with_context(where(planned));
    return r;
  } catch (const std::bad_alloc&) {
    return memo::oom_error();
  }
}

Result<DerivedValue> derive_weight(const DeriveContext& ctx, const NodeInfo& node, Derivation kind) {
  BALLAST_ASSIGN_OR_RETURN(auto planned, plan_derivation(ctx.model, node, kind));
  return derive_weight(ctx, planned);
}

Result<DerivedValue> derive_weight(const DeriveContext& ctx, std::string_view weight, Derivation kind) {
  BALLAST_ASSIGN_OR_RETURN(auto planned, plan_derivation(ctx.model, weight, kind));
  return derive_weight(ctx, planned);
}

Result<std::vector<DerivedValue>> derive_weights(const DeriveContext& ctx, std::span<const PlannedDerivation> plan,
                                                 const DeriveProgressFn& progress) {
  try {
    return derive_all_unwrapped(ctx, plan, progress);
  } catch (const std::bad_alloc&) {
    return memo::oom_error();
  }
}

}  // namespace ballast
