// rank_model: a rank's shards as a Model of their own, so that Residency
// (its memo, budget, strategies, pins and prefetch) works on the shards as
// on any model (cooperative_load.hpp). The weights are inline in the
// model's store, borrowed from the shards' host memory, which the store
// keeps alive; the derivations are the whole model's plan cut to the
// shards (plan_shard_derivations) with their operands renamed to the rank
// model's ids; a row-parallel quant_int8's rows' maxima (share_row_maxima)
// become a weight of the rank's model, its scales operand.
#include <ballast/cooperative_load.hpp>

#include "dist/check_shards.hpp"
#include "onnx/model_impl.hpp"
#include "store/store_access.hpp"

#include <algorithm>

#include <memory>

namespace ballast {

Result<RankModel> rank_model(const Model& whole, const ShardPlan& rank, RankShards shards,
                             std::span<const PlannedDerivation> plan) {
  const std::string context =
      "the model of rank " + std::to_string(rank.rank) + " of " + std::to_string(rank.world) + "'s shards";
  BALLAST_RETURN_IF_ERROR(dist::check_shards(whole, rank, shards), context);
  RankModel out;
  Model::Impl& impl = detail::ModelAccess::impl(out.model);
  impl.format = whole.format();
  impl.path = whole.path();
  impl.metadata = whole.metadata();
  // The shards' memory lives as long as the store (and so the model).
  const auto memory = std::make_shared<RankShards>(std::move(shards));
  impl.store.keep_alive(memory);
  // In-place shards are views of the whole model's files: the rank's store
  // holds the same mappings (so it checks the same recorded file state,
  // and accounts what of each file the rank references).
  const bool any_in_place = std::find(memory->in_place.begin(), memory->in_place.end(), true) != memory->in_place.end();
  if (any_in_place) BALLAST_RETURN_IF_ERROR(store::StoreAccess::share_files(impl.store, whole.store()), context);
  std::vector<ValueId> ids;
  ids.reserve(rank.weights.size());
  impl.weight_order.reserve(rank.weights.size());
  for (std::size_t i = 0; i < rank.weights.size(); ++i) {
    const WeightShard& s = rank.weights[i];
    const auto found = whole.store().weights().find(s.id);
    if (found == whole.store().weights().end())
      return make_error(ErrorCode::not_found, "weight '" + s.weight + "' of the shard plan is not in the model")
          .with_context(context);
    WeightRef w;
    if (!memory->in_place.empty() && memory->in_place[i]) {
      // Its range of the whole weight, where it lies: in the same file, or
      // in the .onnx (inline weights; decoded ones keep their memory).
      BALLAST_ASSIGN_OR_RETURN(const dist::InPlaceRange r, dist::in_place_range(whole, s), context);
      w = found->second;
      if (w.is_external()) {
        ExternalLocation narrowed = *w.external;
        narrowed.offset += r.offset;
        narrowed.length = r.length;
        narrowed.length_was_given = true;
        narrowed.checksum.reset();  // the whole weight's, not its range's
        w.external = std::move(narrowed);
      } else {
        w.inline_bytes = w.inline_bytes.subspan(r.offset, r.length);
      }
    } else {
      w.source = found->second.source;
      w.storage = WeightRef::Storage::inline_borrowed;
      w.inline_bytes = Bytes(memory->shards[i].data(), memory->shards[i].size());
    }
    w.dtype = found->second.dtype;
    w.dims = s.dims;
    const ValueId id = impl.intern(s.weight);
    BALLAST_RETURN_IF_ERROR(impl.store.add(id, std::move(w)), context);
    impl.weight_order.push_back(id);
    ids.push_back(id);
  }
  if (plan.empty()) return out;
  BALLAST_ASSIGN_OR_RETURN(const std::vector<ShardDerivation> cut, plan_shard_derivations(whole, rank, plan), context);
  for (const ShardDerivation& d : cut) {
    const PlannedDerivation& p = plan[d.planned];
    if (!d.launch) {
      out.skipped.push_back(std::string(derivation_name(p.kind())) + " of '" + p.weight + "': " + d.skipped);
      continue;
    }
    PlannedDerivation q = p;
    q.source = ids[d.source];
    q.scales = d.scales ? std::optional<ValueId>(ids[*d.scales]) : std::nullopt;
    if (d.launch->kind == Derivation::quant_int8_given_max) {
      // A row-parallel quant_int8: its rows' maxima are a weight of the
      // rank's model (its scales operand), so Residency uploads, budgets
      // and keys them as any operand (two maxima never share a value).
      const RowMaxima* given = nullptr;
      for (const RowMaxima& r : memory->row_maxima)
        if (r.planned == d.planned && r.maxima.size() == d.launch->rows) given = &r;
      if (given == nullptr) {
        out.skipped.push_back(std::string(derivation_name(p.kind())) + " of '" + p.weight +
                              "': this rank holds part of each row, and the ranks' maxima of the rows were not "
                              "shared (share_row_maxima)");
        continue;
      }
      WeightRef m;
      m.dtype = DataType::float32;
      m.dims = {static_cast<std::int64_t>(given->maxima.size())};
      m.storage = WeightRef::Storage::inline_borrowed;
      m.inline_bytes = Bytes(reinterpret_cast<const std::byte*>(given->maxima.data()), 4 * given->maxima.size());
      const ValueId id = impl.intern(p.weight + "#row_maxima@" + std::to_string(d.planned));
      BALLAST_RETURN_IF_ERROR(impl.store.add(id, std::move(m)), context);
      q.scales = id;
    }
    q.zero_points = d.zero_points ? std::optional<ValueId>(ids[*d.zero_points]) : std::nullopt;
    q.of_transposed = d.of_transposed;
    q.launch = *d.launch;
    out.derivations.push_back(std::move(q));
    out.planned.push_back(d.planned);
  }
  return out;
}

}  // namespace ballast
