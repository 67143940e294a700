// Cooperative loading (issue 29): the ranks of a tensor-parallel engine
// read a checkpoint from storage once between them, not once per rank, and
// each ends with the bytes of its own shards.
//
//   auto plans = plan_shards_all(model, ShardSpec{.world = W});     // every rank's shards
//   auto load = plan_cooperative_load(model, *plans);               // who reads what, who sends what
//   auto mine = cooperative_load(model, *plans, *load, comm, {});   // on every rank, with its communicator
//   // mine->shards[i]: plans->ranks[comm.rank()].weights[i], gathered
//
// The plan: every byte of the union (every weight's referenced bytes, each
// once) gets one reader. A split weight's contiguous shards are read by
// the ranks that hold them, so those bytes never cross the network; a
// replicated weight, and a weight split on its inner axis (strided rows:
// reading them alone would be one small read per row), is cut into
// `world` equal stretches, one read by each rank. Each rank reads its part
// with the cold-read path (read_plan.hpp: large parallel reads, no page
// faults) and, chunk by chunk as they arrive, keeps what its own shards
// need and sends each other rank what its shards need, while it receives
// from the others. Bytes read from storage across all ranks are the
// union, each byte once; what each rank sends and receives follows from
// the plan and is reported.
//
// A rank's shards arrive gathered: an outer-axis shard as its byte ranges,
// an inner-axis (strided) shard as its rows one after another, so every
// shard is one dense host array of its WeightShard::dims and device_bytes,
// ready to upload. (The bytes come to a rank in pieces over the network
// anyway; placing them is the gather, so no device-side slice is needed
// on this path. A process that keeps weights in place gathers a strided
// shard on the device instead: gather_launch, shard.hpp.)
//
// Inline weights (in the .onnx itself, which every rank has opened) are
// copied from the rank's own model, not read or sent.
//
// Failure: an error on any rank (a read, a communicator, a file changed
// under its mapping) is announced to the others (Communicator::fail) and
// every rank's load fails with an error naming the rank; a rank that dies
// without a word is caught by the others' timeout. A failed load returns
// nothing: no rank is left with part of its shards.
#pragma once

#include <ballast/communicator.hpp>
#include <ballast/derive.hpp>
#include <ballast/export.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/model.hpp>
#include <ballast/read_plan.hpp>
#include <ballast/shard.hpp>
#include <ballast/status.hpp>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

// One rank's part of the plan, in bytes.
struct CooperativeRankPlan {
  std::uint32_t rank = 0;
  std::uint32_t domain = 0;          // its storage domain: the ranks that read together
  std::uint64_t read_bytes = 0;      // from storage: its part of the union
  std::uint64_t kept_bytes = 0;      // of those, what its own shards take
  std::uint64_t sent_bytes = 0;      // to the other ranks (a byte two ranks need is sent to both)
  std::uint64_t received_bytes = 0;  // from the other ranks
  std::uint64_t inline_bytes = 0;    // copied from the model file itself (inline weights)
  std::uint64_t shard_bytes = 0;     // what it holds: kept + received + inline (its shards' device bytes)
};

struct CooperativeLoadPlan {
  std::uint32_t world = 1;
  std::uint32_t domains = 1;                // storage domains (ranks that read together)
  std::vector<ReadPlan> reads;              // per rank: its part of its domain's union
  std::vector<CooperativeRankPlan> ranks;   // per rank
  std::uint64_t union_bytes = 0;            // bytes read from storage by all ranks together: the union once
                                            // per domain
  std::uint64_t read_per_rank_bytes = 0;    // the alternative: each rank reading its own shards' bytes
  std::uint64_t read_everything_bytes = 0;  // the naive one: each rank reading the whole checkpoint
};

// The plan for `plans` (plan_shards_all of this model). Pure arithmetic on
// the shard plans: nothing is read.
//
// Storage domains: the ranks that read the same storage at full speed and
// share the work of reading it. `ranks_per_domain` 0 (the default): one
// domain, every rank (one node, or a shared file system). N: ranks
// r / N form a domain (consecutive ranks on a node, as launchers place
// them: N = the ranks of a node whose copy of the checkpoint is local).
// Each domain reads what its ranks need once (a domain without every rank
// reads a replicated or strided weight whole, its contiguous shards only
// where its ranks hold them), and bytes are sent only within a domain.
Result<CooperativeLoadPlan> plan_cooperative_load(const Model& model, const ShardPlans& plans,
                                                  std::uint32_t ranks_per_domain = 0);

// How the ranks trade the bytes they read (communicator.hpp, "Two ways").
// Every rank must resolve to the same mode: the load's first round checks
// it, and ranks that differ fail at once (invalid_argument, naming a peer).
enum class ExchangeMode : std::uint8_t {
  automatic,  // messages where the communicator has them (local, mpi), else rounds (nccl)
  messages,   // each chunk's bytes sent to each peer as soon as it is read
  rounds,     // gathered per peer, traded in collective rounds (Communicator::exchange)
};

struct CooperativeLoadOptions {
  ReadOptions read;  // the cold-read path's settings for this rank's part
  ExchangeMode exchange = ExchangeMode::automatic;
  // Rounds: a rank starts a round when what it gathered for its peers
  // reaches this (and once its reads are done, until every rank's are).
  // A round holds about this much to send plus what the peers send it.
  std::uint64_t round_bytes = std::uint64_t{32} << 20;
  // The longest a rank waits for a peer's next bytes, or at the final
  // barrier: a peer that died is an error after this, not a hang.
  std::chrono::milliseconds timeout{60000};
};

struct CooperativeLoadReport {
  std::uint32_t rank = 0;
  std::uint64_t read_bytes = 0;       // from storage
  std::uint64_t kept_bytes = 0;
  std::uint64_t sent_bytes = 0;
  std::uint64_t received_bytes = 0;
  std::uint64_t inline_bytes = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t messages_received = 0;
  bool rounds = false;                // traded in rounds (else messages)
  std::uint64_t round_count = 0;      // rounds taken part in
  ReadStats read;                     // the cold read of its part
  double seconds = 0;                 // the whole load, barrier included
};

// Host memory for a rank's shards: one anonymous mapping, in 2 MiB pages
// where the system gives them (a few faults for a whole shard set, not
// one per 4 KiB page), never zero-filled by ballast (the bytes are
// written once, by the load). Movable; the memory stays put.
class HostArena {
 public:
  HostArena() = default;
  static Result<HostArena> allocate(std::uint64_t bytes);
  HostArena(HostArena&& other) noexcept;
  HostArena& operator=(HostArena&& other) noexcept;
  HostArena(const HostArena&) = delete;
  HostArena& operator=(const HostArena&) = delete;
  ~HostArena();
  std::byte* data() const noexcept { return data_; }
  std::uint64_t size() const noexcept { return size_; }

 private:
  void* mapping_ = nullptr;
  std::uint64_t mapped_ = 0;
  std::byte* data_ = nullptr;
  std::uint64_t size_ = 0;
};

// The whole rows' maxima of one row-parallel quant_int8 (share_row_maxima).
struct RowMaxima {
  std::size_t planned = 0;    // the derivation's index in the plan given
  std::vector<float> maxima;  // max |w| of each whole row (NaNs left out), one per row of its launch
};

struct RankShards {
  HostArena memory;  // holds every shard below
  // shards[i] holds plans.ranks[rank].weights[i]: device_bytes bytes, its
  // ranges (or strided rows) one after another, parts in order (64-byte
  // aligned in `memory`).
  std::vector<std::span<std::byte>> shards;
  CooperativeLoadReport report;
  // Filled by share_row_maxima: what place_rank and rank_model quantize
  // this rank's part of each row-parallel quant_int8 with.
  std::vector<RowMaxima> row_maxima;
  // shards_in_place's: in_place[i] says shards[i] is the whole model's own
  // bytes (its file's mapping, or the .onnx itself), not a copy; empty:
  // none is. Such a span is read through the model's store (checked,
  // guarded: the file may change under its mapping), never directly, and
  // the model must outlive these shards and what is made of them.
  std::vector<bool> in_place;
};

// ---- A rank's shards without a load: in place.
// A rank that has the whole checkpoint itself (one node's ranks over one
// copy, threads of one process over one Model, a shared file system)
// needs no cooperative load: it takes its shards from the model it opened.
// A shard that is one byte range of its weight (an outer-axis split, a
// replicated weight) is that range of the mapping: nothing is copied or
// read here, and rank_model makes it a view of the same file, so Residency
// registers those pages in place (zero_copy), or pages or uploads just
// them from the file, and the rank's store accounts what of the file it
// references. A shard in several pieces (an inner-axis split's rows, a
// fused weight's parts) is gathered into host memory here, reading only
// its own bytes (through the store: a file changed meanwhile is an io
// error naming it, never SIGBUS). Bytes a rank reads from storage are
// then its own shards' (ShardTotals::read_bytes), not the union once as a
// cooperative load's: in place suits ranks that share a page cache, and
// the cooperative load ranks that each would read from storage.
// report.read_bytes: the gathered bytes; report.kept_bytes: the in-place
// ones (read later, as they are placed); report.seconds: the gather's.
// place_rank, share_row_maxima and rank_model take these shards as they
// take cooperative_load's. Ranks that share one page cache should load
// their Residency with CachePolicy::keep (the default, automatic, drops
// what it read unless a paged budget leaves values for demand, taking
// pages from under a peer that needs them), and where host registration is per
// process (CUDA, HIP), ranks that are threads of one process register
// overlapping pages once only: the others upload (docs/distributed.md).
// Errors: a plan of another model or another file (not_found,
// out_of_bounds, naming the weight), a file changed since it was opened
// (io), no host memory (out_of_memory).
Result<RankShards> shards_in_place(const Model& whole, const ShardPlan& rank);

// Runs this rank's part of `load` (comm.rank(), in a world of comm.world(),
// which must be plans' world). Every rank of the world calls it, with the
// same model and plans (ranks that are threads may share one Model,
// ShardPlans and CooperativeLoadPlan: the load only reads them). Returns
// when this rank holds all its shards and every rank has reached the end
// (so a failure anywhere fails every rank). Host memory: the rank's
// shards (its plan's device bytes, in one HostArena), the staging ring of
// options.read, and the messages in flight (at most one chunk's bytes per
// peer per chunk read, until the peer takes them). There is no cancel but
// Communicator::fail from the rank's own thread and the timeout.
Result<RankShards> cooperative_load(const Model& model, const ShardPlans& plans, const CooperativeLoadPlan& load,
                                    Communicator& comm, const CooperativeLoadOptions& options = {});

// ---- The rows' maxima of row-parallel quant_int8.
// quant_int8 keeps one scale per row, from the whole row's largest
// magnitude; a rank holding part of each row (a row-parallel weight, split
// on K) sees only its part. So each rank takes the maxima of its parts of
// the rows from the shard bytes it holds (here, on the host), the ranks
// combine them by max in one Communicator::exchange round (an all-reduce:
// every rank gives every other its maxima), and each rank quantizes its
// part with the whole rows' maxima (quant_int8_given_max): its codes are
// the whole codes' columns and its scales the whole scales, bit for bit.
//
// Every rank calls it after cooperative_load, with the same plan, before
// place_rank or rank_model; it fills shards.row_maxima (a rank with no
// row-parallel quant_int8, as every rank then, exchanges nothing). Errors:
// the exchange's (a peer that failed, named; one that did not answer
// within `timeout`, named), announced to the others (Communicator::fail);
// maxima of another count from a peer (another plan) are malformed. On
// failure nothing is placed: the rank's derive fails.
Status share_row_maxima(const Model& model, const ShardPlan& rank, RankShards& shards,
                        std::span<const PlannedDerivation> plan, Communicator& comm,
                        std::chrono::milliseconds timeout = std::chrono::milliseconds(60000));

// ---- A rank's shards on its device, and their derivations.

// One derived value of a rank's shards: derivation `planned` of the plan
// given, over the rank's shard (launch: the rank's, pointers filled).
struct RankDerivedValue {
  std::size_t planned = 0;
  std::size_t source = 0;    // its source's index in ShardPlan::weights (and RankDevice::shards)
  DerivationLaunch launch;   // dst: the value (a pair's first half); dst2: a pair's second
  std::uint64_t first_bytes = 0, second_bytes = 0;
};

// Owns what it put on the backend; frees it when destroyed (the backend
// must outlive it) or by release(), which says what failed.
namespace dist {
struct RankDeviceAccess;
}  // namespace dist

class RankDevice {
 public:
  explicit RankDevice(GpuBackend& gpu) : gpu_(&gpu) {}
  RankDevice(RankDevice&& other) noexcept;
  RankDevice& operator=(RankDevice&&) = delete;
  RankDevice(const RankDevice&) = delete;
  RankDevice& operator=(const RankDevice&) = delete;
  ~RankDevice();

  // shards[i]: ShardPlan::weights[i] on the device (0 for an empty shard).
  std::vector<DevicePtr> shards;
  std::uint64_t shard_bytes = 0;
  std::vector<RankDerivedValue> derived;   // in plan order
  std::uint64_t derived_bytes = 0;
  // Held besides: the transposes quant_int8 of a MatMul B reads (a copy of
  // the shard, [N, K]) where the plan's own transpose of that shard was not
  // derived before it, and the rows' maxima of row-parallel quant_int8
  // (f32 [N] each), until release().
  std::uint64_t scratch_bytes = 0;
  std::vector<std::string> skipped;        // "<kind> of '<weight>': <why>" (plan_shard_derivations)

  Status release();

 private:
  friend struct dist::RankDeviceAccess;  // place_rank's allocations (core/dist/place.cpp)
  // An allocation it owns from here on.
  Result<DevicePtr> allocate(std::uint64_t bytes, const std::string& what);

  GpuBackend* gpu_;
  std::vector<DevicePtr> owned_;
};

// Puts a rank's shards (cooperative_load's) on `gpu`, then runs every
// derivation of `plan` (the whole model's plan_derivations) cut to them
// (plan_shard_derivations; skipped ones are listed, not errors), and
// synchronizes. A row-parallel quant_int8 takes its rows' maxima from
// shards.row_maxima (share_row_maxima; without them it is skipped, saying
// so), copied to the device beside it (counted in scratch_bytes). The shards are copied: `shards` may be freed once it
// returns. Device memory: shard_bytes + derived_bytes + scratch_bytes. On
// failure everything it allocated is freed.
Result<RankDevice> place_rank(GpuBackend& gpu, const Model& model, const ShardPlan& rank, const RankShards& shards,
                              std::span<const PlannedDerivation> plan = {});

// ---- A rank's shards under Residency.

// A rank's shards as a Model of their own, so that Residency works on
// them as on any model: its memo, strategies (upload, zero_copy, paged),
// budget, pins and prefetch, over this rank's shards only. Its auto budget
// is then the rank's shard bytes plus its derivations, and its stats say
// what the rank holds.
//
//   auto ranked = rank_model(model, plans->ranks[r], std::move(*mine), whole_plan);
//   ResidencyOptions o;
//   o.strategy = ResidencyStrategy::paged;
//   o.derivations = ranked->derivations;        // the whole plan cut to the shards
//   auto residency = Residency::create(gpu, ranked->model, o);
//   auto value = (*residency)->pin(ranked->derivations[i]);
struct RankModel {
  // One weight per shard, in the shard plan's order, named as in the
  // whole model, with the shard's dims and dtype; its bytes are the
  // shards' host memory (inline weights, kept alive by the store). No
  // graph: nodes() is empty, derivations come from `derivations`.
  Model model;
  // The plan given, cut to the shards (plan_shard_derivations), operands
  // renamed to `model`'s ids; planned[i] is derivations[i]'s index in the
  // plan given (for its names). A row-parallel quant_int8 is
  // quant_int8_given_max here, its scales operand a weight of `model`
  // (not in weight_order) holding its rows' maxima
  // (shards.row_maxima): "<weight>#row_maxima@<planned>", f32 [N].
  std::vector<PlannedDerivation> derivations;
  std::vector<std::size_t> planned;
  std::vector<std::string> skipped;  // "<kind> of '<weight>': <why>"
};
// Takes the shards (their memory moves into the model). Errors: a shard
// set that is not the plan's (invalid_argument, size_mismatch), and
// plan_shard_derivations'.
Result<RankModel> rank_model(const Model& whole, const ShardPlan& rank, RankShards shards,
                             std::span<const PlannedDerivation> plan = {});

}  // namespace ballast

BALLAST_API_END
