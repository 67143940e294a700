// plan_shards and plan_shards_all: resolve every weight's split once, then
// cut it per rank and count what each rank reads (docs/distributed.md).
#include <ballast/shard.hpp>

#include "shard/resolve.hpp"
#include "shard/slice.hpp"
#include "shard/totals.hpp"

namespace ballast {

namespace {

Status check_world(std::uint32_t world) {
  if (world == 0) return make_error(ErrorCode::invalid_argument, "world size 0: a shard plan needs at least one rank");
  if (world > kMaxShardWorld)
    return make_error(ErrorCode::invalid_argument, "world size " + std::to_string(world) + " is above the limit of " +
                                                       std::to_string(kMaxShardWorld) + " ranks");
  return {};
}

// The worlds among 2-16 and the powers of two to kMaxShardWorld that
// split every weight of `model` under `rules`, as a sentence.
std::string worlds_that_fit(const Model& model, const std::vector<ShardRule>& rules) {
  std::string fit;
  for (std::uint32_t w = 2; w <= kMaxShardWorld; w = w < 16 ? w + 1 : w * 2)
    if (shard::resolve_shards(model, rules, w).ok()) fit += (fit.empty() ? "" : ", ") + std::to_string(w);
  return fit.empty() ? "no world of 2-16 ranks or a power of two splits every weight under these rules"
                     : "worlds (of 2-16 and the powers of two) that split every weight under these rules: " + fit;
}

struct Resolved {
  std::vector<shard::ResolvedWeight> weights;
  std::vector<std::string> unmatched_rules;
  std::vector<ByteRange> extents;  // each weight's whole bytes
  std::uint64_t model_bytes = 0;
};

Result<Resolved> resolve(const Model& model, const ShardSpec& spec) {
  BALLAST_RETURN_IF_ERROR(check_world(spec.world));
  const std::vector<ShardRule> defaults = spec.rules.empty() ? default_shard_rules() : std::vector<ShardRule>{};
  const std::vector<ShardRule>& rules = spec.rules.empty() ? defaults : spec.rules;
  Resolved r;
  auto weights = shard::resolve_shards(model, rules, spec.world, &r.unmatched_rules);
  if (!weights) {
    Error e = std::move(weights.error());
    // A split this world cannot make: say which worlds can, when one can.
    if (spec.world > 1 && shard::resolve_shards(model, rules, 1).ok()) e.message += "; " + worlds_that_fit(model, rules);
    return e;
  }
  r.weights = std::move(*weights);
  // Every weight whole: the model's referenced bytes, counted as a rank's are.
  std::vector<WeightShard> whole;
  whole.reserve(r.weights.size());
  for (const shard::ResolvedWeight& w : r.weights) {
    r.extents.push_back({w.base, w.length});
    WeightShard s;
    s.mapping = w.mapping;
    s.ranges.push_back({w.base, w.length});
    whole.push_back(std::move(s));
  }
  BALLAST_ASSIGN_OR_RETURN(r.model_bytes, shard::needed_bytes(whole, r.extents));
  return r;
}

Result<ShardPlan> plan_rank(const Resolved& r, std::uint32_t world, std::uint32_t rank) {
  ShardPlan plan;
  plan.world = world;
  plan.rank = rank;
  plan.model_bytes = r.model_bytes;
  plan.unmatched_rules = r.unmatched_rules;
  plan.weights.reserve(r.weights.size());
  for (const shard::ResolvedWeight& w : r.weights) {
    plan.weights.push_back(shard::slice(w, world, rank));
    const WeightShard& s = plan.weights.back();
    plan.totals.device_bytes += s.device_bytes;
    if (!s.contiguous()) plan.totals.gathered_bytes += s.device_bytes;
  }
  BALLAST_ASSIGN_OR_RETURN(plan.totals.read_bytes, shard::needed_bytes(plan.weights, r.extents));
  plan.totals.not_needed_bytes = r.model_bytes - plan.totals.read_bytes;
  return plan;
}

}  // namespace

Result<ShardPlan> plan_shards(const Model& model, const ShardSpec& spec) {
  const std::string context = "planning shards (world " + std::to_string(spec.world) + ", rank " +
                              std::to_string(spec.rank) + ")";
  BALLAST_RETURN_IF_ERROR(check_world(spec.world), context);
  if (spec.rank >= spec.world)
    return make_error(ErrorCode::invalid_argument, "rank " + std::to_string(spec.rank) + " is outside a world of " +
                                                       std::to_string(spec.world) + " (ranks 0 to " +
                                                       std::to_string(spec.world - 1) + ")");
  BALLAST_ASSIGN_OR_RETURN(const Resolved r, resolve(model, spec), context);
  BALLAST_ASSIGN_OR_RETURN(ShardPlan plan, plan_rank(r, spec.world, spec.rank), context);
  BALLAST_RETURN_IF_ERROR(model.check_unchanged(), context);
  return plan;
}

Result<ShardPlans> plan_shards_all(const Model& model, const ShardSpec& spec) {
  const std::string context = "planning shards (world " + std::to_string(spec.world) + ")";
  BALLAST_ASSIGN_OR_RETURN(const Resolved r, resolve(model, spec), context);
  ShardPlans all;
  all.union_bytes = r.model_bytes;
  all.unmatched_rules = r.unmatched_rules;
  all.ranks.reserve(spec.world);
  for (std::uint32_t rank = 0; rank < spec.world; ++rank) {
    BALLAST_ASSIGN_OR_RETURN(ShardPlan plan, plan_rank(r, spec.world, rank), context);
    all.read_bytes_sum += plan.totals.read_bytes;
    all.ranks.push_back(std::move(plan));
  }
  BALLAST_RETURN_IF_ERROR(model.check_unchanged(), context);
  return all;
}

}  // namespace ballast
