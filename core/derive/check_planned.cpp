#include "derive/check_planned.hpp"

#include <ballast/derivation_kinds.hpp>
#include <ballast/dtype.hpp>

#include <optional>
#include <string>

namespace ballast::derive {
namespace {

// `stored`: the type the weight itself must have (the layout's, but for a
// GGUF block source, which the layout reads as bytes).
Status operand(const Model& model, std::optional<ValueId> id, const OperandLayout& layout, DataType stored,
               const char* role, const PlannedDerivation& p) {
  auto refuse = [&](std::string why) {
    Error e = make_error(ErrorCode::invalid_argument,
                         std::string(role) + " of the plan entry " + std::string(derivation_name(p.kind())) + " of '" +
                             p.weight + "': " + std::move(why) + " (an entry planned for another model, or edited?)");
    e.tensor = p.weight;
    return e;
  };
  if (!layout.present) {
    if (id) return refuse("the launch reads none, but the entry names value " + std::to_string(id->index));
    return {};
  }
  if (!id) return refuse("the launch reads one, but the entry names none");
  auto it = model.store().weights().find(*id);
  if (it == model.store().weights().end())
    return refuse("value " + std::to_string(id->index) + " ('" + std::string(model.value_name(*id)) +
                  "') is not a weight of this model");
  const WeightRef& w = it->second;
  if (w.dtype != stored)
    return refuse("'" + std::string(model.value_name(*id)) + "' is " + std::string(dtype_name(w.dtype)) +
                  ", the launch reads " + std::string(dtype_name(stored)));
  if (w.byte_length() != layout.bytes)
    return refuse("'" + std::string(model.value_name(*id)) + "' holds " + std::to_string(w.byte_length()) +
                  " bytes, the launch reads " + std::to_string(layout.bytes));
  return {};
}

}  // namespace

Status check_planned(const Model& model, const PlannedDerivation& p) {
  DerivationLaunch l = p.launch;
  BALLAST_ASSIGN_OR_RETURN(const DerivationLayout layout, derivation_layout(l), "the plan entry ",
                           derivation_name(p.kind()), " of '", p.weight, "'");
  if (model.value_name(p.source) != p.weight) {
    Error e = make_error(ErrorCode::invalid_argument,
                         "the plan entry " + std::string(derivation_name(p.kind())) + " of '" + p.weight +
                             "' names value " + std::to_string(p.source.index) + ", which this model calls '" +
                             std::string(model.value_name(p.source)) + "' (an entry planned for another model?)");
    e.tensor = p.weight;
    return e;
  }
  const OperandLayout& src = layout[kinds::Slot::src];
  const DataType stored = layout.kind->gguf_blocks ? l.src_type : src.type;
  BALLAST_RETURN_IF_ERROR(operand(model, p.source, src, stored, "the source", p));
  const OperandLayout& scales = layout[kinds::Slot::scales];
  BALLAST_RETURN_IF_ERROR(operand(model, p.scales, scales, scales.type, "the scales", p));
  const OperandLayout& zero_points = layout[kinds::Slot::zero_point];
  return operand(model, p.zero_points, zero_points, zero_points.type, "the zero points", p);
}

}  // namespace ballast::derive
