// place_rank: a rank's shards on its device and the derivations of them
// (cooperative_load.hpp). Derivations run as the kind table says, one
// launch each (quant_int8 of a MatMul B after the transpose it reads: the
// plan's own when derived before it, else one of its own; a row-parallel
// one with its rows' maxima, share_row_maxima's, copied beside it).
#include <ballast/cooperative_load.hpp>

#include "derive/build.hpp"
#include "dist/check_shards.hpp"

#include <unordered_map>

namespace ballast {

// The one way into RankDevice's owned allocations (private: an engine
// holding a RankDevice frees through release(), never adds to it).
struct dist::RankDeviceAccess {
  static Result<DevicePtr> allocate(RankDevice& device, std::uint64_t bytes, const std::string& what) {
    return device.allocate(bytes, what);
  }
};

RankDevice::RankDevice(RankDevice&& other) noexcept
    : shards(std::move(other.shards)), shard_bytes(other.shard_bytes), derived(std::move(other.derived)),
      derived_bytes(other.derived_bytes), scratch_bytes(other.scratch_bytes), skipped(std::move(other.skipped)),
      gpu_(other.gpu_),
      owned_(std::move(other.owned_)) {
  other.owned_.clear();
}

RankDevice::~RankDevice() { (void)release(); }

Status RankDevice::release() {
  Status first;
  for (DevicePtr p : owned_)
    if (Status s = gpu_->free(p); !s.ok() && first.ok()) first = std::move(s);
  owned_.clear();
  shards.clear();
  derived.clear();
  shard_bytes = derived_bytes = scratch_bytes = 0;  // it holds nothing now
  return first;
}

Result<DevicePtr> RankDevice::allocate(std::uint64_t bytes, const std::string& what) {
  try {
    owned_.reserve(owned_.size() + 1);
  } catch (...) {
    return make_error(ErrorCode::out_of_memory, "no host memory to record an allocation").with_context(what);
  }
  BALLAST_ASSIGN_OR_RETURN(const DevicePtr ptr, gpu_->allocate(bytes), what);
  owned_.push_back(ptr);
  return ptr;
}

namespace {

// A rank's output blocks: owned by its RankDevice from the start, so a
// failure leaves them to it (it frees all it holds when the load fails).
// Shards are device memory: nothing read in place to check after the wait.
class RankBlocks final : public derive::OutputBlocks {
 public:
  explicit RankBlocks(RankDevice& out) noexcept : out_(out) {}
  Status obtain(DerivationLaunch& l, const DerivationSizes& sizes) override {
    BALLAST_ASSIGN_OR_RETURN(l.dst, dist::RankDeviceAccess::allocate(out_, sizes.dst_bytes, "allocating its output"));
    if (sizes.dst2_bytes != 0) {
      BALLAST_ASSIGN_OR_RETURN(l.dst2, dist::RankDeviceAccess::allocate(out_, sizes.dst2_bytes, "allocating its second output"));
    }
    return Status();
  }
  Status give_back(DerivationLaunch&, const DerivationSizes&, Status failure) override { return failure; }

 private:
  RankDevice& out_;
};

}  // namespace

Result<RankDevice> place_rank(GpuBackend& gpu, const Model& model, const ShardPlan& rank, const RankShards& shards,
                              std::span<const PlannedDerivation> plan) {
  const std::string context = "placing rank " + std::to_string(rank.rank) + "'s shards";
  BALLAST_RETURN_IF_ERROR(dist::check_shards(model, rank, shards), context);
  RankDevice out(gpu);
  out.shards.assign(rank.weights.size(), 0);
  for (std::size_t i = 0; i < rank.weights.size(); ++i) {
    const std::uint64_t bytes = shards.shards[i].size();
    if (bytes == 0) continue;
    const std::string what = "the shard of '" + rank.weights[i].weight + "'";
    BALLAST_ASSIGN_OR_RETURN(out.shards[i], dist::RankDeviceAccess::allocate(out, bytes, what), context);
    // An in-place shard is read from its file's mapping through the store.
    BALLAST_RETURN_IF_ERROR(dist::read_shard(model, rank, shards, i,
                                             [&](Bytes b) { return gpu.copy_to_device(out.shards[i], 0, b); }),
                            context + ": " + what);
    out.shard_bytes += bytes;
  }
  if (plan.empty()) return out;

  BALLAST_ASSIGN_OR_RETURN(const std::vector<ShardDerivation> cut, plan_shard_derivations(model, rank, plan), context);
  // Each shard's [N, K] transpose once derived (the plan's own, or a
  // scratch one): what quant_int8 of a MatMul B reads, never built twice.
  std::unordered_map<std::size_t, DevicePtr> transposed;
  RankBlocks blocks(out);
  for (const ShardDerivation& d : cut) {
    const PlannedDerivation& whole = plan[d.planned];
    const std::string name = std::string(derivation_name(whole.kind())) + " of '" + whole.weight + "'";
    if (!d.launch) {
      out.skipped.push_back(name + ": " + d.skipped);
      continue;
    }
    DerivationLaunch launch = *d.launch;
    const WeightShard& source = rank.weights[d.source];
    if (launch.kind == Derivation::quant_int8_given_max) {
      // A row-parallel quant_int8: the whole rows' maxima, on the device beside it.
      const RowMaxima* given = nullptr;
      for (const RowMaxima& r : shards.row_maxima)
        if (r.planned == d.planned && r.maxima.size() == launch.rows) given = &r;
      if (given == nullptr) {
        out.skipped.push_back(name + ": this rank holds part of each row, and the ranks' maxima of the rows were "
                                     "not shared (share_row_maxima)");
        continue;
      }
      const std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(given->maxima));
      BALLAST_ASSIGN_OR_RETURN(launch.scales,
                               dist::RankDeviceAccess::allocate(out, bytes.size(), "the rows' maxima of " + name),
                               context);
      BALLAST_RETURN_IF_ERROR(gpu.copy_to_device(launch.scales, 0, bytes), context + ": the rows' maxima of " + name);
      out.scratch_bytes += bytes.size();
    }
    launch.src = out.shards[d.source];
    if (d.scales) launch.scales = out.shards[*d.scales];
    if (d.zero_points) launch.zero_point = out.shards[*d.zero_points];
    if (d.of_transposed && transposed.contains(d.source)) {
      // Launches are not ordered on every backend: the transpose completes first.
      BALLAST_RETURN_IF_ERROR(gpu.synchronize(), context + ": " + name);
      launch.src = transposed.at(d.source);
    } else if (d.of_transposed) {
      // quant_int8 of a MatMul B reads the [N, K] transpose of the [K, N] shard.
      DerivationLaunch t;
      t.kind = Derivation::transpose;
      t.src_type = model.store().weights().at(source.id).dtype;
      t.rows = static_cast<std::uint64_t>(source.dims[0]);
      t.cols = static_cast<std::uint64_t>(source.dims[1]);
      t.src = launch.src;
      BALLAST_ASSIGN_OR_RETURN(const DerivationSizes ts, derivation_sizes(t), context + ": " + name);
      BALLAST_RETURN_IF_ERROR(derive::start(gpu, t, ts, blocks), context + ": " + name);
      out.scratch_bytes += ts.dst_bytes;
      // Launches are not ordered on every backend: the transpose completes first.
      BALLAST_RETURN_IF_ERROR(gpu.synchronize(), context + ": " + name);
      launch.src = t.dst;
      transposed.emplace(d.source, t.dst);
    }
    BALLAST_ASSIGN_OR_RETURN(const DerivationSizes sizes, derivation_sizes(launch), context + ": " + name);
    BALLAST_RETURN_IF_ERROR(derive::start(gpu, launch, sizes, blocks), context + ": " + name);
    if (whole.kind() == Derivation::transpose) transposed.emplace(d.source, launch.dst);
    out.derived.push_back({d.planned, d.source, launch, sizes.dst_bytes, sizes.dst2_bytes});
    out.derived_bytes += sizes.dst_bytes + sizes.dst2_bytes;
  }
  BALLAST_RETURN_IF_ERROR(gpu.synchronize(), context);
  return out;
}

}  // namespace ballast
