// Residency::create(): the options checked, the budget settled (auto from
// the accounting), and a budget too small for the largest single entry
// refused up front rather than at the first unlucky pin.
#include "residency/impl.hpp"

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

// The device bytes pinning `p` needs at once: its outputs plus the operands
// it pins while it is built (zero_copy operands cost no device bytes).
struct Need {
  std::uint64_t bytes = 0;
  std::string what;
};

template <class StrategyOf>
Result<Need> need_of(const WeightStore& store, const StrategyOf& strategy_of, const PlannedDerivation& p) {
  auto out_bytes = [](const PlannedDerivation& d, Derivation kind, std::uint64_t rows,
                      std::uint64_t cols) -> Result<std::uint64_t> {
    DerivationLaunch l = d.launch;
    l.kind = kind;
    l.rows = rows;
    l.cols = cols;
    BALLAST_ASSIGN_OR_RETURN(auto s, derivation_sizes(l));
    return sum({s.dst_bytes, s.dst2_bytes});
  };
  auto operand = [&](std::optional<ValueId> id) -> std::uint64_t {
    if (!id || strategy_of(*id) == ResidencyStrategy::zero_copy) return 0;
    auto it = store.weights.find(*id);
    return it == store.weights.end() ? 0 : it->second.byte_length();
  };
  const std::string what = std::string(derivation_name(p.kind)) + " of '" + p.weight + "'";
  auto out = out_bytes(p, p.kind, p.launch.rows, p.launch.cols);
  if (!out.ok()) return std::move(out.error()).with_context("sizing " + what);
  const std::uint64_t src = operand(p.source);
  if (!p.of_transposed) return Need{sum({*out, src, operand(p.scales), operand(p.zero_points)}), what};
  BALLAST_ASSIGN_OR_RETURN(auto t, out_bytes(p, Derivation::transpose, p.launch.cols, p.launch.rows));
  return Need{std::max(sum({t, src}), sum({t, *out})), what};
}

}  // namespace

Result<std::unique_ptr<Residency>> Residency::create(GpuBackend& backend, const Model& model,
                                                     const ResidencyOptions& options, std::string label) {
  auto m = std::make_unique<Impl>(backend, model, options, std::move(label));
  for (const auto& [id, strategy] : options.overrides) {
    if (!model.store().weights.contains(id))
      return make_error(ErrorCode::invalid_argument,
                        "residency override names '" + std::string(model.value_name(id)) + "', which is not a weight");
    m->overrides[id] = strategy;
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
  if (!options.budget_bytes && !any_paged) return std::unique_ptr<Residency>(new Residency(std::move(m)));

  std::vector<PlannedDerivation> plan;
  if (options.derivations) {
    plan = *options.derivations;
  } else {
    PlanOptions planning;
    planning.max_amplification = options.max_amplification;
    auto planned = plan_derivations(model, planning);
    if (!planned.ok()) return std::move(planned.error()).with_context("planning the model's derivations");
    plan = std::move(*planned);
  }
  if (options.budget_bytes) {
    m->budget = *options.budget_bytes;
  } else if (any_paged) {
    auto b = auto_budget(model.store(), plan, options.max_amplification);
    if (!b.ok()) return std::move(b.error()).with_context("computing the auto budget");
    m->budget = b->total;
  }

  if (m->budget != kUnlimitedBudget) {
    // The largest set of bytes one pin holds at once must fit on its own.
    Need largest;
    for (const auto& [id, w] : model.store().weights)
      if (m->strategy_of(id) != ResidencyStrategy::zero_copy && w.byte_length() > largest.bytes)
        largest = {w.byte_length(), "weight '" + std::string(model.value_name(id)) + "'"};
    for (const PlannedDerivation& p : plan) {
      BALLAST_ASSIGN_OR_RETURN(Need n, need_of(model.store(), [&](ValueId id) { return m->strategy_of(id); }, p));
      if (n.bytes > largest.bytes) largest = std::move(n);
    }
    // In a paged model, weights overridden to upload (and their derived
    // values, which follow them) stay for good: the paged rest must still
    // fit beside them.
    std::uint64_t kept = 0;
    if (options.strategy == ResidencyStrategy::paged) {
      auto stays = [&](ValueId id) { return m->strategy_of(id) == ResidencyStrategy::upload; };
      for (const auto& [id, strategy] : m->overrides)
        if (strategy == ResidencyStrategy::upload) kept = sum({kept, model.store().weights.at(id).byte_length()});
      std::set<identity::Entry> counted;
      for (const PlannedDerivation& p : plan) {
        if (!stays(p.source) || !counted.insert(identity::of_derivation(model.store(), p)).second) continue;
        DerivationLaunch l = p.launch;
        l.kind = p.kind;
        BALLAST_ASSIGN_OR_RETURN(auto sizes, derivation_sizes(l));
        kept = sum({kept, sizes.dst_bytes, sizes.dst2_bytes});
      }
    }
    if (sum({largest.bytes, kept}) > m->budget)
      return make_error(ErrorCode::invalid_argument,
                        "a budget of " + std::to_string(m->budget) + " bytes is below the " +
                            std::to_string(largest.bytes) + " bytes that " + largest.what +
                            " needs on the device at once (with the operands it is built from)" +
                            (kept == 0 ? std::string()
                                       : " beside the " + std::to_string(kept) +
                                             " bytes of the weights kept uploaded and their derived values"));
  }
  return std::unique_ptr<Residency>(new Residency(std::move(m)));
}

}  // namespace ballast
