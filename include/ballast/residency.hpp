// Residency: where a model's weights live on a device, and how much device
// memory that takes. One interface, three strategies, chosen per model
// (overridable per weight):
//
//   upload     each referenced weight copied to device memory once, on first use
//   zero_copy  each data file's referenced ranges registered read-only; a weight
//              is read in place (one that cannot be, such as an inline weight,
//              is uploaded, under the budget)
//   paged      weights (and their derivations) copied onto the device on first
//              use, under a byte budget, evicted when cold, rebuilt when needed
//
//   ResidencyOptions options;
//   options.strategy = ResidencyStrategy::paged;           // budget: auto
//   options.policy = DerivationPolicy::only({Derivation::repack_int4, Derivation::quant_int8});
//   options.group_by = group_by_layer("model.layers.");    // one group per layer
//   auto residency = Residency::create(gpu, model, options);
//   auto groups = (*residency)->groups();                  // in graph order
//   (*residency)->prefetch(groups[i + 1]);                 // the next layer, in the background
//   auto layer = (*residency)->pin(groups[i], 100ms);      // Result<PinnedSet>: all members or none
//   launch_my_kernels(layer->derived[0].first(), ...);     // ... and wait for them, then
//   layer->reset();                                        // unpin (or let it go out of scope)
//
// A pinned entry is never evicted. When the pinned set plus a request cannot
// fit the budget, the request fails with out_of_memory naming the budget,
// the pinned bytes and the request: never an overshoot. A single pin never
// waits for another pin to go (only, briefly, for prefetches already in
// flight, which never wait themselves); pin(group, wait) waits up to `wait`
// for other pins to be released, holding nothing meanwhile.
//
// The budget bounds every device byte the object holds for the model:
// sources paged in or uploaded, and derived values. `auto` is computed from
// the accounting (auto_budget), never from file lengths: a data file with an
// orphaned prefix costs nothing here, and it counts every derivation the
// policy keeps (every kind unless `policy` or `derivations` says
// otherwise). Full story, policy and stats: docs/residency.md.
#pragma once

#include <ballast/export.hpp>
#include <ballast/derive.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/read_plan.hpp>
#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

// ------------------------------------------------------------ the auto budget

struct AutoBudget {
  std::uint64_t external_bytes = 0;  // union of the referenced ranges of every data file (dead bytes excluded)
  std::uint64_t inline_bytes = 0;    // weights stored inside the .onnx
  std::uint64_t overlap_bytes = 0;   // bytes counted again because distinct weights' ranges overlap
                                     // (paged residency holds each range apart; aliases of one range count once)
  std::uint64_t source_bytes = 0;    // external_bytes + overlap_bytes + inline_bytes
  std::uint64_t derived_bytes = 0;   // every output of the planned derivations (derivation_sizes)
  std::uint64_t derivations = 0;     // planned derivations counted (the same bytes with the same
                                     // parameters count once, as the memo shares them)
  std::uint64_t total = 0;           // source_bytes + derived_bytes
};

// The budget of `store` with `plan` (plan_derivations() of its model).
// overflow when a sum exceeds 64 bits; a planned launch derivation_sizes()
// refuses is that error, naming the weight. unsupported when the total is
// above `max_amplification` times the referenced bytes (external_bytes +
// inline_bytes; <= 0: no cap), naming both and the ratio: bounded work for
// a small hostile file (docs/security.md).
Result<AutoBudget> auto_budget(const WeightStore& store, std::span<const PlannedDerivation> plan,
                               double max_amplification = kDefaultMaxAmplification);
// plan_derivations(model) under the same cap, then the above.
Result<AutoBudget> auto_budget(const Model& model, double max_amplification = kDefaultMaxAmplification);

// ------------------------------------------------------------ which encodings

// The derivations an engine's kernels read. plan_derivations() plans every
// kind that applies (a float MatMul weight gets transpose, to_f16 and
// quant_int8); an engine reads one encoding per weight, and what it never
// pins should neither be counted by the auto budget nor checked by create().
// An entry is kept when its kind is in `kinds` and `keep`, when set, says
// yes: `kinds` for the usual rule ("int4 weights repacked, float weights as
// int8"), `keep` for per-weight exceptions.
struct DerivationPolicy {
  std::uint32_t kinds = ~std::uint32_t{0};             // bit 1 << kind; default: every kind
  std::function<bool(const PlannedDerivation&)> keep;  // empty: every entry of those kinds

  static DerivationPolicy only(std::initializer_list<Derivation> kinds);
  static DerivationPolicy none();  // no derivations: the engine reads source weights only
  bool wants(const PlannedDerivation& p) const;
};

// The entries of `plan` the policy keeps, in plan order. plan_derivations()'
// order is the graph's: nodes in Model::nodes() order, and per node its
// kinds in the order transpose, to_f16, quant_int8 (MatMul, Gemm) or
// dequant_int4, repack_int4 (MatMulNBits), each value once, where first
// planned.
std::vector<PlannedDerivation> apply_policy(std::span<const PlannedDerivation> plan, const DerivationPolicy& policy);

// ------------------------------------------------------------ groups

// What a decode loop pins together, typically one layer: the planned
// derivations its kernels read and the source weights they read as stored.
struct ResidencyGroup {
  std::string name;                            // "model.layers.3.", a node's name, or a weight's
  std::vector<PlannedDerivation> derivations;  // in plan order
  std::vector<ValueId> weights;                // read as stored (no derivation of the plan reads them)
};

// Names the group of a member from its weight's name and the node that
// consumes it ("" when none: a weight no node reads, a plan entry made
// without a node).
using GroupKey = std::function<std::string(std::string_view weight, std::string_view node)>;
// By layer: a weight named `stem`, a decimal number, then "." goes to the
// group "<stem><number>." ("model.layers." puts "model.layers.3.mlp.weight"
// in "model.layers.3."; "layer" puts "layer0.weight" in "layer0."). Any
// other weight is a group of its own, named by the weight ("lm_head.weight").
GroupKey group_by_layer(std::string stem);
// By consuming node: a group per node; a weight read as stored by several
// nodes joins the first one's; one no node reads is a group of its own.
GroupKey group_by_node();

// Splits `plan` and the model's weights that no entry of `plan` reads
// (source, scales or zero points) into groups under `key`. Groups are in
// the order of the first node (Model::nodes()) that reads one of their
// members, then the rest in weight order; members in plan order
// (derivations) and weight_order() (weights). Every entry and every such
// weight is in exactly one group.
std::vector<ResidencyGroup> make_groups(const Model& model, std::span<const PlannedDerivation> plan,
                                        const GroupKey& key);

// ------------------------------------------------------------ strategies

enum class ResidencyStrategy : std::uint8_t { upload, zero_copy, paged };

// "upload", "zero-copy", "paged".
std::string_view residency_strategy_name(ResidencyStrategy s) noexcept;
// Accepts the names above (and "zero_copy"); invalid_argument otherwise.
Result<ResidencyStrategy> parse_residency_strategy(std::string_view text);

inline constexpr std::uint64_t kUnlimitedBudget = ~std::uint64_t{0};

struct ResidencyOptions {
  ResidencyStrategy strategy = ResidencyStrategy::zero_copy;
  // Device bytes this object may hold. nullopt: `auto` for paged (auto_budget's
  // total), unlimited for upload and zero_copy.
  std::optional<std::uint64_t> budget_bytes;
  // The derivations this engine will pin: what the auto budget counts and
  // what create() checks the budget against. nullopt: every planned one
  // (plan_derivations(model): every kind where it applies, so `auto`
  // counts encodings the engine may never read); empty: none, only source
  // weights. `policy` is applied to it either way.
  std::optional<std::vector<PlannedDerivation>> derivations;
  // The encodings the engine reads (default: all). Residency::plan() is
  // `derivations` (or the model's plan) filtered by it.
  DerivationPolicy policy;
  // When set, create() splits plan() into groups (Residency::groups()) and
  // refuses a budget below what the largest group needs pinned at once.
  GroupKey group_by;
  // Per-weight strategy, overriding `strategy` for the weights named (each
  // at most once: a weight named twice is invalid_argument).
  std::vector<std::pair<ValueId, ResidencyStrategy>> overrides;
  // zero_copy: a dead gap this long splits a file's registration.
  std::uint64_t split_gap_bytes = kRegistrationSplitGap;
  // zero_copy on a backend whose reads of registrations cannot be guarded
  // (DeviceWeightsOptions::register_unguarded).
  bool register_unguarded = false;
  // The cap plan_derivations() and the auto budget apply when create()
  // plans or sizes (PlanOptions::max_amplification; 0: no cap).
  double max_amplification = kDefaultMaxAmplification;
};

struct ResidencyStats {
  ResidencyStrategy strategy = ResidencyStrategy::zero_copy;
  std::uint64_t budget_bytes = kUnlimitedBudget;
  std::uint64_t device_bytes = 0;         // held now: sources copied in plus derived values
  std::uint64_t peak_device_bytes = 0;    // the most ever held at once (never above the budget in force then)
  std::uint64_t pinned_bytes = 0;         // of device_bytes, pinned now: by Pinned handles, and the operands
                                          // a build (a demand load's or a prefetch's) holds while its kernel runs
  std::uint64_t registered_bytes = 0;     // zero_copy registrations (page-locked host memory)
  std::uint64_t uploaded_bytes = 0;       // sources copied in by upload (once each), zero_copy fallbacks included
  std::uint64_t paged_in_bytes = 0;       // sources copied in by paged, every page-in counted
  std::uint64_t page_ins = 0;
  std::uint64_t source_evictions = 0;
  std::uint64_t derived_evictions = 0;
  std::uint64_t derived_builds = 0;       // derivation kernels run
  std::uint64_t derived_rebuilds = 0;     // ...of which rebuilt a value evicted before
  std::uint64_t host_copy_bytes = 0;      // bytes copied on the host outside the device transfer (0 on every path)
  std::uint64_t prefetches = 0;           // entries a prefetch paged in or built
  std::uint64_t prefetches_skipped = 0;   // prefetch requests that did not fit without evicting what is in use
                                          // (or that another caller was loading)
  std::uint64_t prefetches_failed = 0;    // prefetches that failed otherwise (the file, the device): each also
                                          // said through the log sink; a pin of the value tries again
  double paging_seconds = 0;              // time spent copying sources in and building derived values
  // The block pool (paged): blocks of evicted values kept, still allocated,
  // for the next value of the same size. Pooled bytes count in
  // device_bytes and in the budget; they are given back to the backend
  // before any entry is evicted for room.
  std::uint64_t pool_hits = 0;            // blocks a page-in or build took from the pool
  std::uint64_t pool_misses = 0;          // blocks it had to allocate from the backend
  std::uint64_t pool_releases = 0;        // pooled blocks given back to the backend (room for another size)
  std::uint64_t pooled_bytes = 0;         // of device_bytes, held in the pool now
  // Frees the backend refused (an eviction's, a failed build's): still
  // live on the device, so in device_bytes and the budget. Each is asked
  // again whenever room is short, and at release().
  std::uint64_t stuck_bytes = 0;

  // One line, every field: "paged, budget 49152 B: held 36864 B (peak
  // 49152 B), pinned 0 B, registered 0 B; uploaded 0 B, paged in 29056 B
  // in 3 page-in(s); evictions 2 source, 1 derived; builds 5 (1 rebuild(s));
  // prefetches 0 (0 skipped, 0 failed); host copies 0 B; paging 2.591 ms; pool 0
  // hit(s), 5 miss(es), 0 release(s), 0 B pooled; 0 B stuck".
  std::string to_string() const;
};

// ------------------------------------------------------------ cold loading

// Residency::load()'s knobs: the reader's (read_plan.hpp), and for
// zero_copy weights how their pages are faulted in before registration.
struct ResidencyLoadOptions {
  ReadOptions read;
  std::uint32_t populate_threads = 0;  // populate_mapping's threads (zero_copy); 0: one per
                                       // hardware thread (measured best here: docs/loading.md);
                                       // at most 256 run (populate_mapping's cap)
  std::uint64_t populate_piece_bytes = 8ull << 20;
  // Source weights whose bytes the page cache holds whole (cached_bytes)
  // are copied from the mapping, as pin() would: warm, a read would only
  // add a copy. true: read them too.
  bool read_cached = false;
};

// What load() did. Every figure is of this call.
struct ResidencyLoadReport {
  std::uint64_t planned_bytes = 0;    // the read plan: referenced bytes of the sources it fills
  std::uint64_t planned_ranges = 0;
  std::uint32_t planned_files = 0;
  ReadStats read;                     // the cold read (read.bytes == planned_bytes)
  std::uint64_t sources_read = 0;     // source values filled from the read
  std::uint64_t sources_cached = 0;   // source values the page cache held whole: copied from the mapping
  std::uint64_t cached_bytes = 0;     // their bytes
  std::uint64_t inline_sources = 0;   // source values copied from the model file's mapping (inline weights)
  std::uint64_t zero_copy_weights = 0;  // source values registered in place (tied names: one value)
  std::uint64_t populated_bytes = 0;  // their pages faulted in ahead (populate_mapping)
  std::uint64_t zero_copy_uploads = 0;  // zero_copy source values not readable in place (misaligned, file
                                        // not registrable), uploaded instead under the budget
  std::uint64_t derived_built = 0;    // derivation kernels run
  std::uint64_t already_resident = 0; // values load() found on the device and left alone
  std::uint64_t left_for_demand = 0;  // values that did not fit the budget beside the ones before them
  std::uint64_t left_bytes = 0;       // their device bytes
  double seconds = 0;                 // the whole call
  CachePolicy cache = CachePolicy::drop;  // what the read left in the page cache (automatic resolved)
  // "read 2814 MiB in 3.12 s (902 MB/s, io_uring, 3 files, 12 ranges, O_DIRECT 3 of 3, staging 32 MiB);
  //  48 sources, 0 inline, 0 zero-copy; 96 derived; 0 already resident; 0 left for demand; 5.41 s"
  std::string to_string() const;
};

// A pinned weight or derived value: its device pointer(s) stay valid, and it
// stays resident, while this handle lives. Hold it until the kernels that
// read it have completed. Move-only; reset() or destruction unpins.
class Residency;
class Pinned {
 public:
  Pinned() = default;
  Pinned(Pinned&& other) noexcept;
  Pinned& operator=(Pinned&& other) noexcept;
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  ~Pinned();

  DevicePtr first() const noexcept { return first_; }    // the weight, the value, or a pair's first half
  DevicePtr second() const noexcept { return second_; }  // a pair's second half (repack_int4, quant_int8)
  std::uint64_t first_bytes() const noexcept { return first_bytes_; }    // bytes at first()
  std::uint64_t second_bytes() const noexcept { return second_bytes_; }  // bytes at second(); 0 unless a pair
  std::uint64_t bytes() const noexcept { return first_bytes_ + second_bytes_; }
  explicit operator bool() const noexcept { return owner_ != nullptr; }
  void reset() noexcept;

 private:
  friend class Residency;
  Pinned(Residency* owner, void* entry, DevicePtr first, DevicePtr second, std::uint64_t first_bytes,
         std::uint64_t second_bytes) noexcept
      : owner_(owner), entry_(entry), first_(first), second_(second), first_bytes_(first_bytes),
        second_bytes_(second_bytes) {}
  Residency* owner_ = nullptr;
  void* entry_ = nullptr;
  DevicePtr first_ = 0;
  DevicePtr second_ = 0;
  std::uint64_t first_bytes_ = 0;
  std::uint64_t second_bytes_ = 0;
};

// What pin(group) holds: one Pinned per member, in the group's order.
// Move-only; reset() or destruction unpins them all.
struct PinnedSet {
  std::vector<Pinned> derived;  // derived[i] is group.derivations[i]
  std::vector<Pinned> weights;  // weights[i] is group.weights[i]
  std::uint64_t bytes() const noexcept;
  void reset() noexcept;
};

// One model's weights on one backend. Thread-safe: any number of threads
// may pin, prefetch and read stats at once; two threads missing one entry
// copy or build it once. release() and destruction must not overlap other
// use. Every Pinned must be gone before destruction; release() with values
// still pinned is defined (it frees them and says so, below). The backend under it may be
// shared with the engine's own threads: every GpuBackend method is safe
// to call from several threads at once (docs/residency.md, "Threads").
class Residency final : public ModelResource<GpuBackend> {
 public:
  // `backend` and `model` must outlive the object (and not move).
  // invalid_argument for a budget below the largest single entry the model
  // can need, or (with group_by) below what the largest group needs pinned
  // at once, naming it; counted beside what stays on the device once
  // placed (weights that are not paged and take device memory, and their
  // derived values, never evicted), which with nothing paged is the whole
  // footprint.
  static Result<std::unique_ptr<Residency>> create(GpuBackend& backend, const Model& model,
                                                   const ResidencyOptions& options = {},
                                                   std::string label = "residency");
  ~Residency() override;  // releases whatever release() has not
  Residency(const Residency&) = delete;
  Residency& operator=(const Residency&) = delete;

  // A source weight on the device, pinned (by id or graph name).
  Result<Pinned> pin(ValueId weight);
  Result<Pinned> pin(std::string_view weight);
  // A derived value (from plan_derivations()), built from its sources as
  // needed, pinned. Its sources need not stay resident afterwards.
  Result<Pinned> pin(const PlannedDerivation& derivation);

  // Every member of `group` pinned, or none: a member that cannot be had
  // unpins the ones already pinned (they stay resident, evictable) before
  // the error returns. Short of room beside other pins, it waits up to
  // `wait_for_room` for pins to be released (holding none of the group
  // meanwhile, so two threads waiting on each other cannot deadlock; one
  // group is taken at a time, so they cannot keep failing each other),
  // then fails with out_of_memory naming the budget, the bytes pinned and
  // the group's bytes (milliseconds::max(): no deadline). No attempt starts
  // past the deadline: a wait of 0 is one attempt. A group larger than the
  // whole budget fails at once, and so does a waiting one when
  // set_budget() lowers the budget under its size.
  // Pins the caller itself holds count as others' pins: it may wait on
  // itself until the deadline.
  Result<PinnedSet> pin(const ResidencyGroup& group, std::chrono::milliseconds wait_for_room = {});

  // Pages in (and builds) what is missing, in the background, without
  // pinning. Best effort: an entry that does not fit without evicting what
  // is in use is skipped (counted), never an error; one that fails
  // otherwise (the file changed, the device refused) is counted as failed
  // and said through the log sink, and the next pin of it tries again.
  // While a prefetch builds, the operands it reads count in
  // stats().pinned_bytes.
  void prefetch(std::span<const ValueId> weights);
  void prefetch(std::span<const PlannedDerivation> derivations);
  void prefetch(const ResidencyGroup& group);  // its derivations, then its weights
  // Waits until every prefetch queued so far has finished.
  void wait_for_prefetches();

  // Puts the model on the device from storage at storage speed, ahead of
  // use (the cold start: a fresh node, a page cache that does not hold the
  // model). In plan order, every derivation of the plan (plan(), or the
  // model's plan under options.derivations and policy when create() made
  // none) and the sources it is built from, then every other weight of the
  // model: source weights of upload and paged strategy are read by
  // read_plan() (only their referenced bytes, each once, in large parallel
  // reads) and copied from its staging buffers into their device blocks
  // (those the page cache already holds whole are copied from the mapping
  // instead, unless options.read_cached),
  // and each derivation is built, on a thread of its own, as soon as its
  // sources are in, while the reads go on. zero_copy weights have their
  // pages faulted in by populate_mapping() and are registered. Inline
  // weights are copied from the model file's mapping. Nothing is evicted
  // and nothing is pinned afterwards: under a budget, load stops at the
  // first value that does not fit beside the ones before it, and the rest
  // are left for pin() to page in on demand (counted in the report).
  // Values already resident are left alone. What the reads leave in the
  // page cache is options.read.cache's; automatic (the default) drops it,
  // which suits upload and a budget that holds every value, and keeps it
  // for a paged residency that leaves values for demand (evictions will
  // page bytes in again through the mapping): docs/loading.md, "Cache
  // policy"; the report says which ran. On error (an io error naming
  // the file, a device error, a build that fails) values completed so far
  // stay resident and whole, none is left half-copied, and the error says
  // which step failed. Call it from one thread, before the engine pins
  // (other threads pinning meanwhile wait for a value being loaded).
  // docs/loading.md.
  Result<ResidencyLoadReport> load(const ResidencyLoadOptions& options = {});

  // The derivations create() planned and sized the budget with:
  // options.derivations (or plan_derivations(model)) under options.policy,
  // in plan order. Planned only when create() needed a plan (paged, a
  // budget, or group_by); empty otherwise.
  std::span<const PlannedDerivation> plan() const noexcept;
  // make_groups(model, plan(), options.group_by); empty without group_by.
  std::span<const ResidencyGroup> groups() const noexcept;

  ResidencyStats stats() const;
  std::uint64_t budget() const noexcept;  // kUnlimitedBudget when none
  // Changes the budget of a live residency: an engine giving device memory
  // to a growing KV cache, or taking it back. Raised, pins waiting for room
  // (pin(group, wait)) try again at once. Lowered below what is held, the
  // pool and unpinned evictable values go, in the policy's order, until
  // what is held fits; a group waiting for room that the new budget cannot
  // hold at all fails at once (out_of_memory), not at its deadline. Refused, with the budget and everything resident
  // left as they were: invalid_argument for a budget below the minimum
  // create() would refuse (the largest pin beside what stays, named), or
  // for a residency created without a budget (no budget_bytes and nothing
  // paged; an explicit kUnlimitedBudget is a budget, which a later call
  // may bound); out_of_memory when what
  // cannot be evicted now (pinned, being loaded, kept for the model's
  // life) is above it (decided before anything is evicted; only a free the
  // backend refuses on the way can leave values evicted and the budget as
  // it was); invalid_argument after release(). kUnlimitedBudget
  // lifts the bound (a later call may set one again). Thread-safe.
  Status set_budget(std::uint64_t bytes);
  // The weight's strategy as carried out: a zero_copy weight that cannot be
  // read in place (inline; misaligned, or its file not registrable, once a
  // pin or load found so) is upload, counted in device_bytes and the budget.
  ResidencyStrategy strategy_of(ValueId weight) const noexcept;
  // The zero_copy registrations (DeviceWeights' account of them).
  WeightResidency registrations() const;

  std::string label() const override;
  // Frees every device value and ends every registration. Idempotent.
  // Values still pinned are freed too, and the status says so
  // (invalid_argument naming the first); resetting those Pinned handles
  // afterwards does nothing, while this object lives.
  Released release(GpuBackend& backend) override;

 private:
  friend class Pinned;
  struct BALLAST_HIDDEN Impl;
  explicit Residency(std::unique_ptr<Impl> impl);
  void unpin(void* entry) noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ballast

BALLAST_API_END
