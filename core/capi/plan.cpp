// Plans: which derivations a model's weights get, from its graph or by the
// built-in name rules. A plan is immutable and belongs to one model; every
// call that takes a plan and a model or residency checks they match.
#include "capi/objects.hpp"

#include <ballast/derivation_kinds.hpp>
#include <ballast/dtype.hpp>
#include <ballast/log.hpp>

using namespace ballast;
using namespace ballast::capi;

namespace ballast::capi {

void* make_plan_handle(std::shared_ptr<const ModelObject> model, std::vector<PlannedDerivation> entries) {
  auto plan = std::make_shared<PlanObject>();
  plan->model = std::move(model);
  plan->entries = std::move(entries);
  for (const PlannedDerivation& p : plan->entries) {
    PlanRow row;
    row.kind = std::string(derivation_name(p.kind()));
    DerivationLaunch launch = p.launch;
    if (auto sizes = derivation_sizes(launch); sizes.ok()) {
      row.first_bytes = sizes->dst_bytes;
      row.second_bytes = sizes->dst2_bytes;
    }
    // Each output as the kind table lays it out, shaped the way
    // `ballast derive --dump` writes it (a kind that keeps the source's
    // dims, to_f16, has them whatever their rank).
    if (auto layout = derivation_layout(launch); layout.ok()) {
      const kinds::Slot slots[2] = {kinds::Slot::dst, kinds::Slot::dst2};
      for (int h = 0; h < 2; ++h) {
        const OperandLayout& o = (*layout)[slots[h]];
        if (!o.present) continue;
        ValueLayoutRow& half = row.halves[h];
        half.present = true;
        half.dtype = std::string(dtype_name(o.type));
        half.bytes = o.bytes;
        const auto source = plan->model->model.store().weights().find(p.source);
        if (layout->kind->output_keeps_source_dims && source != plan->model->model.store().weights().end())
          half.dims.assign(source->second.dims.begin(), source->second.dims.end());
        else
          for (std::uint8_t d = 0; d < o.rank; ++d) half.dims.push_back(static_cast<std::int64_t>(o.dims[d]));
      }
    }
    plan->rows.push_back(std::move(row));
  }
  return insert_handle(Kind::plan, std::move(plan));
}

}  // namespace ballast::capi

extern "C" {

ballast_status* ballast_plan_derivations(const ballast_model* model, int32_t source, ballast_plan** out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output handle");
    if (e) return e;
    auto m = lookup<ModelObject>(model, Kind::model, &e);
    if (!m) return e;
    if (source < BALLAST_PLAN_AUTOMATIC || source > BALLAST_PLAN_GRAPH_AND_RULES)
      return invalid_argument("invalid_argument: plan source " + std::to_string(source) +
                              " is none of ballast_plan_source");
    PlanOptions options;
    options.source = static_cast<PlanSource>(source);
    // A weight a rule recognises but cannot derive (GPTQ packing) is said
    // in the log rather than failing the whole plan.
    std::vector<PlanSkip> skipped;
    options.skipped = &skipped;
    auto plan = plan_derivations(m->model, options);
    if (!plan.ok()) return from_error(plan.error());
    for (const PlanSkip& s : skipped)
      log_message(LogLevel::warning, "plan",
                  (s.rule.empty() ? "node " + s.node : "rule " + s.rule) + " skipped" +
                      (s.weight.empty() ? "" : " " + s.weight) + ": " + s.reason);
    *out = static_cast<ballast_plan*>(make_plan_handle(m, std::move(*plan)));
    return nullptr;
  });
}

ballast_status* ballast_plan_free(ballast_plan* plan) {
  if (plan == nullptr) return nullptr;
  return guarded([&]() -> ballast_status* {
    return remove_handle(plan, Kind::plan) ? nullptr : bad_handle(Kind::plan, plan);
  });
}

const char* ballast_derivation_kind_name(uint32_t kind) {
  // The table's names are static strings, in the enum's order.
  return ballast::is_known_derivation(kind) ? ballast::derivation_kind(static_cast<ballast::Derivation>(kind)).name
                                            : nullptr;
}

ballast_status* ballast_plan_count(const ballast_plan* plan, size_t* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output");
    if (e) return e;
    auto p = lookup<PlanObject>(plan, Kind::plan, &e);
    if (!p) return e;
    *out = p->entries.size();
    return nullptr;
  });
}

ballast_status* ballast_plan_entry(const ballast_plan* plan, size_t index, ballast_derivation_info* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto p = lookup<PlanObject>(plan, Kind::plan, &e);
    if (!p) return e;
    if (auto* bad = check_index(index, p->entries.size(), "plan entry")) return bad;
    const PlannedDerivation& d = p->entries[index];
    ballast_derivation_info info{};
    info.weight = d.weight.c_str();
    info.kind = p->rows[index].kind.c_str();
    info.node = d.node.c_str();
    info.why = d.why.c_str();
    info.first_bytes = p->rows[index].first_bytes;
    info.second_bytes = p->rows[index].second_bytes;
    return write_out(info, out);
  });
}

ballast_status* ballast_plan_entry_layout(const ballast_plan* plan, size_t index, int half,
                                          ballast_value_layout* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto p = lookup<PlanObject>(plan, Kind::plan, &e);
    if (!p) return e;
    if (auto* bad = check_index(index, p->entries.size(), "plan entry")) return bad;
    if (half != 0 && half != 1) return invalid_argument("invalid_argument: half must be 0 (first) or 1 (second)");
    const ValueLayoutRow& row = p->rows[index].halves[half];
    if (!row.present)
      return out_of_bounds("out_of_bounds: " + p->rows[index].kind + " of " + p->entries[index].weight +
                           " has no second half");
    ballast_value_layout layout{};
    layout.dtype = row.dtype.c_str();
    layout.ndims = row.dims.size();
    layout.dims = row.dims.data();
    layout.bytes = row.bytes;
    return write_out(layout, out);
  });
}

}  // extern "C"
