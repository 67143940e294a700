// Residency::create(): the options checked, the plan made (under the
// engine's policy) and grouped, the budget settled (auto from the
// accounting), and a budget too small for the largest single entry, or
// the largest group, refused up front rather than at the first unlucky pin.
#include "derive/check_planned.hpp"
#include "residency/impl.hpp"

#include "derive/transposed_source.hpp"

#include <algorithm>
#include <set>

namespace ballast {
namespace {

std::uint64_t sum(std::initializer_list<std::uint64_t> parts) {
  std::uint64_t total = 0;
  for (std::uint64_t p : parts)
    if (__builtin_add_overflow(total, p, &total)) return kUnlimitedBudget;
  return total;
}

// The device bytes a derivation writes (both halves of a pair).
Result<std::uint64_t> outputs(const PlannedDerivation& p) {
  DerivationLaunch l = p.launch;
  BALLAST_ASSIGN_OR_RETURN(auto s, derivation_sizes(l));
  return sum({s.dst_bytes, s.dst2_bytes});
}

// The device bytes pinning `p` needs at once: its outputs plus the operands
// it pins while it is built (zero_copy operands cost no device bytes).
struct Need {
  std::uint64_t bytes = 0;
  std::string what;
};

template <class StrategyOf>
std::uint64_t weight_bytes(const WeightStore& store, const StrategyOf& strategy_of, std::optional<ValueId> id) {
  if (!id || strategy_of(*id) == ResidencyStrategy::zero_copy) return 0;
  auto it = store.weights().find(*id);
  return it == store.weights().end() ? 0 : it->second.byte_length();
}

template <class StrategyOf>
Result<Need> need_of(const WeightStore& store, const StrategyOf& strategy_of, const PlannedDerivation& p) {
  auto operand = [&](std::optional<ValueId> id) { return weight_bytes(store, strategy_of, id); };
  const std::string what = std::string(derivation_name(p.kind())) + " of '" + p.weight + "'" +
                           (p.node.empty() ? "" : " for node '" + p.node + "'");
  auto out = outputs(p);
  if (!out.ok()) return std::move(out.error()).with_context("sizing " + what);
  const std::uint64_t src = operand(p.source);
  if (!p.of_transposed) return Need{sum({*out, src, operand(p.scales), operand(p.zero_points)}), what};
  BALLAST_ASSIGN_OR_RETURN(auto t, outputs(transposed_source_of(p)));
  return Need{std::max(sum({t, src}), sum({t, *out})), what};
}

// What pinning a whole group needs at once: every member (each distinct
// value once), plus the most that building one member adds beside them
// (its operands that are not members themselves). An upper bound: members
// pinned in order never need more.
template <class StrategyOf>
Result<Need> need_of(const WeightStore& store, const StrategyOf& strategy_of, const ResidencyGroup& g) {
  const std::string what = "group '" + g.name + "' (" + std::to_string(g.derivations.size() + g.weights.size()) +
                           " members pinned together)";
  std::set<identity::Entry> members;
  std::uint64_t bytes = 0;
  for (const PlannedDerivation& p : g.derivations) {
    if (!members.insert(identity::of_derivation(store, p)).second) continue;
    auto out = outputs(p);
    if (!out.ok()) return std::move(out.error()).with_context("sizing " + what);
    bytes = sum({bytes, *out});
  }
  for (ValueId id : g.weights)
    if (members.insert(identity::of_source(store, id)).second) bytes = sum({bytes, weight_bytes(store, strategy_of, id)});
  auto outside = [&](std::optional<ValueId> id) -> std::uint64_t {
    return id && !members.contains(identity::of_source(store, *id)) ? weight_bytes(store, strategy_of, id) : 0;
  };
  std::uint64_t extra = 0;
  for (const PlannedDerivation& p : g.derivations) {
    std::uint64_t e = sum({outside(p.source), outside(p.scales), outside(p.zero_points)});
    if (p.of_transposed) {
      const PlannedDerivation t = transposed_source_of(p);
      if (members.contains(identity::of_derivation(store, t))) {
        e = 0;  // the copy is pinned already: the build reads only it
      } else {
        BALLAST_ASSIGN_OR_RETURN(auto t_bytes, outputs(t));
        e = sum({t_bytes, outside(p.source)});
      }
    }
    extra = std::max(extra, e);
  }
  return Need{sum({bytes, extra}), what};
}

}  // namespace

Result<std::vector<PlannedDerivation>> Residency::Impl::make_plan(const Model& model, const ResidencyOptions& options) {
  if (options.derivations) {
    for (const PlannedDerivation& p : *options.derivations)
      BALLAST_RETURN_IF_ERROR(derive::check_planned(model, p), "ResidencyOptions::derivations");
    return apply_policy(*options.derivations, options.policy);
  }
  PlanOptions planning;
  planning.max_amplification = options.max_amplification;
  // What the rules skip is not derived, so it is not budgeted either
  // (plan_derivations with PlanOptions::skipped shows what and why).
  std::vector<PlanSkip> skipped;
  planning.skipped = &skipped;
  auto planned = plan_derivations(model, planning);
  if (!planned.ok()) return std::move(planned.error()).with_context("planning the model's derivations");
  return apply_policy(*planned, options.policy);
}

Status Residency::Impl::check_budget(std::uint64_t bytes) const {
  const BudgetMinimum& need = minimum;
  // Beside what stays, the largest pin of a paged value; with nothing
  // paged, what stays covers every pin (the largest is part of it).
  const std::uint64_t needed = need.any_paged ? sum({need.largest, need.kept}) : std::max(need.largest, need.kept);
  if (needed <= bytes) return Status();
  const std::string kept_text = std::to_string(need.kept) +
                                " bytes that stay on the device once placed (weights that are not paged, "
                                "uploaded or copied where they cannot be read in place, and their derived "
                                "values, which are never evicted)";
  if (!need.any_paged && need.kept >= need.largest)
    return make_error(ErrorCode::invalid_argument, "a budget of " + std::to_string(bytes) + " bytes is below the " +
                                                       kept_text + ": nothing is paged, so everything placed stays");
  return make_error(ErrorCode::invalid_argument,
                    "a budget of " + std::to_string(bytes) + " bytes is below the " + std::to_string(need.largest) +
                        " bytes that " + need.largest_what +
                        " needs on the device at once (with the operands it is built from)" +
                        (need.kept == 0 ? std::string() : " beside the " + kept_text));
}

Result<std::unique_ptr<Residency>> Residency::create(GpuBackend& backend, const Model& model,
                                                     const ResidencyOptions& options, std::string label) {
  auto m = std::make_unique<Impl>(backend, model, options, std::move(label));
  for (const auto& [id, strategy] : options.overrides) {
    if (!model.store().weights().contains(id))
      return make_error(ErrorCode::invalid_argument,
                        "residency override names '" + std::string(model.value_name(id)) + "', which is not a weight");
    // Twice is a caller's mistake whichever way it goes: which one was meant?
    if (!m->overrides.emplace(id, strategy).second)
      return make_error(ErrorCode::invalid_argument,
                        "residency overrides name '" + std::string(model.value_name(id)) + "' twice");
  }
  bool any_zero_copy = options.strategy == ResidencyStrategy::zero_copy;
  for (const auto& [id, strategy] : m->overrides) any_zero_copy |= strategy == ResidencyStrategy::zero_copy;
  if (any_zero_copy) {
    DeviceWeightsOptions dw;
    dw.split_gap_bytes = options.split_gap_bytes;
    dw.register_unguarded = options.register_unguarded;
    m->registrations = std::make_unique<DeviceWeights>(backend, model.store(), dw, m->label + ": registrations");
  }

  bool any_paged = options.strategy == ResidencyStrategy::paged;
  for (const auto& [id, strategy] : m->overrides) any_paged |= strategy == ResidencyStrategy::paged;
  if (!options.budget_bytes && !any_paged && !options.group_by)
    return std::unique_ptr<Residency>(new Residency(std::move(m)));

  BALLAST_ASSIGN_OR_RETURN(m->plan, Impl::make_plan(model, options));
  const std::vector<PlannedDerivation>& plan = m->plan;
  if (options.group_by) m->groups = make_groups(model, plan, options.group_by);
  if (options.budget_bytes) {
    m->budget = *options.budget_bytes;
  } else if (any_paged) {
    auto b = auto_budget(model.store(), plan, options.max_amplification);
    if (!b.ok()) return std::move(b.error()).with_context("computing the auto budget");
    m->budget = b->total;
  }

  // Sized whenever a budget was asked for, an unlimited one too (an
  // explicit kUnlimitedBudget, paged or not): set_budget() may bound it
  // later, as it may bound one it lifted. The minimum and what stays are
  // the same whatever the budget; only a bounded one is checked against
  // them here, and only a bounded one fails create() when they cannot be
  // sized (a derivation whose size overflows: its pin fails then).
  const bool unlimited = m->budget == kUnlimitedBudget;
  auto size_minimum = [&]() -> Status {
    // The largest set of bytes one pin holds at once must fit on its own.
    Need largest;
    for (const auto& [id, w] : model.store().weights())
      if (m->strategy_of(id) != ResidencyStrategy::zero_copy && w.byte_length() > largest.bytes)
        largest = {w.byte_length(), "weight '" + std::string(model.value_name(id)) + "'"};
    auto strategy_of = [&](ValueId id) { return m->strategy_of(id); };
    for (const PlannedDerivation& p : plan) {
      BALLAST_ASSIGN_OR_RETURN(Need n, need_of(model.store(), strategy_of, p));
      if (n.bytes > largest.bytes) largest = std::move(n);
    }
    // With groups, what the largest one needs pinned at once.
    for (const ResidencyGroup& g : m->groups) {
      BALLAST_ASSIGN_OR_RETURN(Need n, need_of(model.store(), strategy_of, g));
      if (n.bytes > largest.bytes) largest = std::move(n);
    }
    // What stays for good once placed: weights that are not paged and
    // take device memory (uploaded, or zero_copy ones the backend cannot
    // read in place), and every derived value of a weight that is not
    // paged. In a paged model the paged rest must fit beside it; in a model
    // with nothing paged it is the whole footprint, which a pin would
    // otherwise find too large one value at a time, far into a run.
    const Capabilities& caps = backend.capabilities();
    const bool registers = caps.host_registration && (caps.guarded_host_reads || options.register_unguarded);
    auto device_copy = [&](ValueId id, const WeightRef& w) {
      switch (m->strategy_of(id)) {
        case ResidencyStrategy::paged: return false;
        case ResidencyStrategy::upload: return true;
        case ResidencyStrategy::zero_copy: break;
      }
      // DeviceWeights uploads these in place of registering them.
      if (!w.is_external() || !registers) return true;
      return !caps.unaligned_operands && w.external->offset % derivation_operand_alignment(w.dtype) != 0;
    };
    // Tied names count once; a paged name tied to one that stays is kept
    // with it (Impl::evictable), whichever name reaches the entry first.
    std::uint64_t kept = 0;
    for (const auto& [id, w] : model.store().weights())
      if (device_copy(id, w) && m->kept_bytes.insert(identity::of_bytes(model.store(), id)).second)
        kept = sum({kept, w.byte_length()});
    std::set<identity::Entry> counted;
    for (const PlannedDerivation& p : plan) {
      if (m->evictable(p.source) || !counted.insert(identity::of_derivation(model.store(), p)).second) continue;
      BALLAST_ASSIGN_OR_RETURN(auto out, outputs(p));
      kept = sum({kept, out});
    }
    m->minimum = {largest.bytes, std::move(largest.what), kept, any_paged};
    m->sized = true;
    return m->check_budget(m->budget);
  };
  if (options.budget_bytes || any_paged) {
    Status sized = size_minimum();
    if (!sized.ok() && !unlimited) return std::move(sized.error());
    if (!sized.ok()) {  // unlimited, as before: nothing to change it from
      m->kept_bytes.clear();
      m->sized = false;
    }
  }
  return std::unique_ptr<Residency>(new Residency(std::move(m)));
}

}  // namespace ballast
