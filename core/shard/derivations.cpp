// plan_shard_derivations: a whole model's planned derivation, cut to one
// rank's shards (shard.hpp). Each kind reads its source as [rows, cols]:
//   transpose, to_f16, quant_int8, the GGUF kinds: as stored, rows every
//     dim but the innermost, cols the innermost;
//   quant_int8 of a MatMul B [K, N] (of_transposed): rows N, cols K;
//   dequant_int4, repack_int4: rows N, cols K, from B [N, k_blocks, blob].
// The rank's launch is the same kind over its shard's [rows, cols], but
// for quant_int8 of a shard holding part of each row (a row-parallel
// weight): quant_int8_given_max, whose rows' maxima the ranks share
// (share_row_maxima) so that each quantizes its part with the whole row's.
#include <ballast/shard.hpp>

#include <unordered_map>

namespace ballast {

namespace {

std::uint64_t product(const Dims& d, std::size_t begin, std::size_t end) {
  std::uint64_t n = 1;
  for (std::size_t i = begin; i < end; ++i) n *= static_cast<std::uint64_t>(d[i]);
  return n;
}

// [rows, cols] of a source of `dims` as stored (rows: every dim but the last).
std::pair<std::uint64_t, std::uint64_t> as_stored(const Dims& dims) {
  if (dims.empty()) return {1, 1};
  return {product(dims, 0, dims.size() - 1), static_cast<std::uint64_t>(dims[dims.size() - 1])};
}

}  // namespace

Result<std::vector<ShardDerivation>> plan_shard_derivations(const Model& model, const ShardPlan& rank,
                                                            std::span<const PlannedDerivation> plan) {
  std::unordered_map<ValueId, std::size_t> index;
  for (std::size_t i = 0; i < rank.weights.size(); ++i) index.emplace(rank.weights[i].id, i);
  std::vector<ShardDerivation> out;
  out.reserve(plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const PlannedDerivation& p = plan[i];
    ShardDerivation d;
    d.planned = i;
    d.of_transposed = p.of_transposed;
    const auto find = [&](ValueId id) -> std::optional<std::size_t> {
      const auto it = index.find(id);
      return it == index.end() ? std::nullopt : std::optional<std::size_t>(it->second);
    };
    const auto src = find(p.source);
    if (!src)
      return make_error(ErrorCode::invalid_argument, "the derivation " + std::string(derivation_name(p.kind())) +
                                                         " of '" + p.weight + "' reads a weight the shard plan lacks")
          .with_context("planning derivations of rank " + std::to_string(rank.rank) + "'s shards");
    d.source = *src;
    if (p.scales) d.scales = find(*p.scales);
    if (p.zero_points) d.zero_points = find(*p.zero_points);
    const WeightShard& shard = rank.weights[d.source];
    const auto whole_it = model.store().weights().find(p.source);
    const Dims& whole = whole_it->second.dims;
    const auto skip = [&](std::string why) {
      d.skipped = std::move(why);
      out.push_back(d);
    };
    DerivationLaunch launch = p.launch;
    const Derivation kind = p.kind();
    if (kind == Derivation::dequant_int4 || kind == Derivation::repack_int4) {
      // B [N, k_blocks, blob]: N rows; K from the rank's whole blocks.
      if (whole.size() != 3 || shard.dims.size() != 3 || launch.rows != static_cast<std::uint64_t>(whole[0])) {
        skip("its launch does not read B as [N, k_blocks, blob]");
        continue;
      }
      launch.rows = static_cast<std::uint64_t>(shard.dims[0]);
      if (shard.dims[1] != whole[1]) {
        if (launch.cols != static_cast<std::uint64_t>(whole[1]) * launch.block_size) {
          skip("K (" + std::to_string(launch.cols) + ") is not a whole number of blocks of " +
               std::to_string(launch.block_size) + ", so its blocks cannot be split");
          continue;
        }
        launch.cols = static_cast<std::uint64_t>(shard.dims[1]) * launch.block_size;
      }
      if ((p.scales && !d.scales) || (p.zero_points && !d.zero_points)) {
        skip("its scales or zero points are not in the shard plan");
        continue;
      }
    } else {
      auto [rows, cols] = as_stored(whole);
      auto [shard_rows, shard_cols] = as_stored(shard.dims);
      if (p.of_transposed) {
        // [K, N] stored; quantized as [N, K]: rows N (the inner axis), cols K.
        if (whole.size() != 2 || shard.dims.size() != 2) {
          skip("its launch does not read the weight as a 2-D MatMul B");
          continue;
        }
        std::swap(rows, cols);
        std::swap(shard_rows, shard_cols);
      }
      if (launch.rows != rows || launch.cols != cols) {
        skip("its launch ([" + std::to_string(launch.rows) + ", " + std::to_string(launch.cols) +
             "]) does not read the weight as stored ([" + std::to_string(rows) + ", " + std::to_string(cols) + "])");
        continue;
      }
      // One scale per row from the whole row's largest magnitude, and this
      // rank holds part of each row: the maxima come from every rank.
      if (kind == Derivation::quant_int8 && shard_cols != cols) launch.kind = Derivation::quant_int8_given_max;
      launch.rows = shard_rows;
      launch.cols = shard_cols;
    }
    if (auto sizes = derivation_sizes(launch); !sizes.ok()) {
      skip("the shard's launch is refused: " + sizes.error().to_string());
      continue;
    }
    d.launch = launch;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace ballast
