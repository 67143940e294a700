// Residency: where a model's weights live on a device, and how much device
// memory that takes. One interface, three strategies, chosen per model
// (overridable per weight):
//
//   upload     each referenced weight copied to device memory once, on first use
//   zero_copy  each data file's referenced ranges registered read-only; a weight
//              is read in place (inline weights are uploaded)
//   paged      weights (and their derivations) copied onto the device on first
//              use, under a byte budget, evicted when cold, rebuilt when needed
//
//   ResidencyOptions options;
//   options.strategy = ResidencyStrategy::paged;           // budget: auto
//   auto residency = Residency::create(gpu, model, options);
//   auto plan = plan_derivations(model);
//   (*residency)->prefetch(std::span(*plan).subspan(next, 4));  // the next layer, in the background
//   auto w = (*residency)->pin((*plan)[i]);                 // Result<Pinned>: derived, paged in as needed
//   launch_my_kernel(w->ptr());                             // ... and wait for it, then
//   w->reset();                                             // unpin (or let it go out of scope)
//
// A pinned entry is never evicted. When the pinned set plus a request cannot
// fit the budget, the request fails with out_of_memory naming the budget,
// the pinned bytes and the request: never an overshoot, and never a wait for
// another pin to go (only, briefly, for prefetches already in flight, which
// never wait themselves).
//
// The budget bounds every device byte the object holds for the model:
// sources paged in or uploaded, and derived values. `auto` is computed from
// the accounting (auto_budget), never from file lengths: a data file with an
// orphaned prefix costs nothing here. Full story, policy and stats:
// docs/residency.md.
#pragma once

#include <ballast/export.hpp>
#include <ballast/derive.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
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
  // (plan_derivations(model)); empty: none, only source weights.
  std::optional<std::vector<PlannedDerivation>> derivations;
  // Per-weight strategy, overriding `strategy` for the weights named.
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
  std::uint64_t peak_device_bytes = 0;    // the most ever held at once (never above the budget)
  std::uint64_t pinned_bytes = 0;         // of device_bytes, pinned now
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
  double paging_seconds = 0;              // time spent copying sources in and building derived values
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

  DevicePtr ptr() const noexcept { return first_; }      // the weight, the value, or a pair's first half
  DevicePtr second() const noexcept { return second_; }  // a pair's second half (repack_int4, quant_int8)
  std::uint64_t bytes() const noexcept { return bytes_; }
  explicit operator bool() const noexcept { return owner_ != nullptr; }
  void reset() noexcept;

 private:
  friend class Residency;
  Pinned(Residency* owner, void* entry, DevicePtr first, DevicePtr second, std::uint64_t bytes) noexcept
      : owner_(owner), entry_(entry), first_(first), second_(second), bytes_(bytes) {}
  Residency* owner_ = nullptr;
  void* entry_ = nullptr;
  DevicePtr first_ = 0;
  DevicePtr second_ = 0;
  std::uint64_t bytes_ = 0;
};

// One model's weights on one backend. Thread-safe: any number of threads
// may pin, prefetch and read stats at once; two threads missing one entry
// copy or build it once. release() and destruction must not overlap other
// use, and every Pinned must be gone by then.
class Residency final : public ModelResource<GpuBackend> {
 public:
  // `backend` and `model` must outlive the object. invalid_argument for a
  // budget below the largest single entry the model can need.
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

  // Pages in (and builds) what is missing, in the background, without
  // pinning. Best effort: an entry that does not fit without evicting what
  // is in use is skipped (counted), never an error.
  void prefetch(std::span<const ValueId> weights);
  void prefetch(std::span<const PlannedDerivation> derivations);
  // Waits until every prefetch queued so far has finished.
  void wait_for_prefetches();

  ResidencyStats stats() const;
  std::uint64_t budget() const noexcept;  // kUnlimitedBudget when none
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
