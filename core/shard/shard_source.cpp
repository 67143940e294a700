#include "shard/shard_source.hpp"

namespace ballast::shard {

Result<ShardSource> shard_source(const Model& model, const WeightShard& shard) {
  const auto it = model.store().weights().find(shard.id);
  if (it == model.store().weights().end())
    return make_error(ErrorCode::not_found, "weight '" + shard.weight + "' of the shard plan is not in the model");
  ShardSource out;
  out.weight = &it->second;
  if (it->second.is_external()) {
    const auto p = model.store().external_mmap_provenance(it->second);
    if (!p) return make_error(ErrorCode::not_found, "the file of weight '" + shard.weight + "' is not mapped");
    out.base = p->offset;
    out.mapping = p->mapping;
  }
  return out;
}

}  // namespace ballast::shard
