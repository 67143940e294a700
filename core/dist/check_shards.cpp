#include "dist/check_shards.hpp"
#include "shard/shard_source.hpp"

namespace ballast::dist {

Result<InPlaceRange> in_place_range(const Model& whole, const WeightShard& shard) {
  if (!shard.contiguous() || shard.ranges.size() != 1)
    return make_error(ErrorCode::invalid_argument, "the shard of '" + shard.weight + "' is not one byte range of it");
  BALLAST_ASSIGN_OR_RETURN(const shard::ShardSource source, shard::shard_source(whole, shard));
  const WeightRef& w = *source.weight;
  const std::uint64_t base = source.base;
  // The plan's file must be the weight's: a plan of another model names another.
  if (shard.mapping != source.mapping)
    return make_error(ErrorCode::invalid_argument, "the shard plan of '" + shard.weight +
                                                       "' counts its bytes in another file than the model's weight");
  const ByteRange& r = shard.ranges[0];
  const std::uint64_t length = w.byte_length();
  if (r.offset < base || r.offset - base > length || r.length > length - (r.offset - base))
    return make_error(ErrorCode::out_of_bounds, "the shard of '" + shard.weight + "', bytes [" +
                                                    std::to_string(r.offset) + ", +" + std::to_string(r.length) +
                                                    "), is not inside the weight's " + std::to_string(length) +
                                                    " bytes from " + std::to_string(base));
  return InPlaceRange{&w, r.offset - base, r.length};
}

Status check_shards(const Model& whole, const ShardPlan& rank, const RankShards& shards) {
  if (shards.report.rank != rank.rank)
    return make_error(ErrorCode::invalid_argument, "the shards of rank " + std::to_string(shards.report.rank) +
                                                       " given with the plan of rank " + std::to_string(rank.rank));
  if (shards.shards.size() != rank.weights.size())
    return make_error(ErrorCode::invalid_argument, "the rank's shards are not its plan's (" +
                                                       std::to_string(shards.shards.size()) + " arrays for " +
                                                       std::to_string(rank.weights.size()) + " weights)");
  if (!shards.in_place.empty() && shards.in_place.size() != shards.shards.size())
    return make_error(ErrorCode::invalid_argument, "the rank's shards say of " + std::to_string(shards.in_place.size()) +
                                                       " whether they are in place, not of its " +
                                                       std::to_string(shards.shards.size()));
  for (std::size_t i = 0; i < rank.weights.size(); ++i) {
    if (shards.shards[i].size() != rank.weights[i].device_bytes)
      return make_error(ErrorCode::size_mismatch, "the shard of '" + rank.weights[i].weight + "' holds " +
                                                      std::to_string(shards.shards[i].size()) + " bytes, its plan " +
                                                      std::to_string(rank.weights[i].device_bytes));
    if (shards.in_place.empty() || !shards.in_place[i]) continue;
    // In place: the very bytes of the whole model's weight, or it is read
    // (and registered) as something it is not.
    BALLAST_ASSIGN_OR_RETURN(const InPlaceRange r, in_place_range(whole, rank.weights[i]));
    const auto bytes = whole.store().bytes(*r.weight);
    if (!bytes || bytes->data() + r.offset != shards.shards[i].data() || r.length != shards.shards[i].size())
      return make_error(ErrorCode::invalid_argument, "the shard of '" + rank.weights[i].weight +
                                                         "' is said to be in place, but is not the model's own bytes");
  }
  return {};
}

Status read_shard(const Model& whole, const ShardPlan& rank, const RankShards& shards, std::size_t i,
                  const std::function<Status(Bytes)>& sink) {
  if (i >= shards.shards.size() || i >= rank.weights.size() || (!shards.in_place.empty() && i >= shards.in_place.size()))
    return make_error(ErrorCode::invalid_argument, "the shard set has no shard " + std::to_string(i));
  if (shards.in_place.empty() || !shards.in_place[i]) return sink(shards.shards[i]);
  BALLAST_ASSIGN_OR_RETURN(const InPlaceRange r, in_place_range(whole, rank.weights.at(i)));
  if (r.length != shards.shards[i].size())
    return make_error(ErrorCode::size_mismatch, "the shard of '" + rank.weights[i].weight + "' holds " +
                                                    std::to_string(shards.shards[i].size()) + " bytes, its range " +
                                                    std::to_string(r.length));
  return whole.store().transfer(*r.weight, r.offset, r.length, sink);
}

}  // namespace ballast::dist
