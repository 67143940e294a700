// DeviceWeights: makes a model's source weights visible to one backend.
//
// External weights are read in place (the zero_copy residency): of each
// mapped data file, only what the graph references is registered with the
// backend, once: the hull of its referenced bytes, split where a dead gap
// is at least DeviceWeightsOptions::split_gap_bytes, widened to the
// backend's import alignment. A weight's device pointer is its
// registration's pointer plus its offset in it, so a weight is contiguous
// for its full length (each lies wholly inside one registration). Where the
// backend cannot register host memory (capability absent) or refuses this
// mapping (e.g. too large to lock), that file's weights are uploaded
// instead, and `residency()` says so and why: never a silent copy.
//
// On a backend whose kernels read whole, naturally aligned elements
// (Capabilities::unaligned_operands false: CPU, CUDA, HIP), a weight whose
// host address is not a multiple of its element size is uploaded too.
//
// Weights that are one byte range under two names (tied embeddings, a
// deduplicated blob) get one device pointer either way: one registration
// range, or one upload. Device values here are read-only.
//
// Inline weights (stored inside the .onnx itself) are uploaded: they are
// small, and registering many small ranges that share pages would collide
// on vendors that register whole pages.
//
// Thread safety: resolve() may be called from many threads; release() must
// not race with it.
//
// Lifetime: the backend and the store must outlive this object. Destroying
// it without release() releases on its backend anyway (the same backstop as
// TeardownHost(gpu)), discarding the report: call release() yourself, or
// register it with a TeardownHost, to see failures. docs/device_weights.md.
#pragma once

#include <ballast/export.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

BALLAST_API_BEGIN

namespace ballast {

struct WeightResidency {
  std::uint64_t registered_files = 0;   // mappings registered zero-copy (at least one range)
  std::uint64_t registered_bytes = 0;   // bytes of the ranges registered, import alignment included
  std::uint64_t uploaded_weights = 0;   // weights copied to device memory
  std::uint64_t uploaded_bytes = 0;
  std::uint64_t misaligned_uploads = 0; // weights in a registered file uploaded because their
                                        // offset is not aligned to their element size
  std::uint64_t fallback_files = 0;     // mappings that could not be registered
  std::string fallback_reason;          // the first reason, e.g. "backend cannot register host memory: ..."
  std::uint64_t registered_ranges = 0;  // registrations made (a file may need several)
  std::uint64_t referenced_bytes = 0;   // bytes weights reference inside those ranges
  std::uint64_t mapped_bytes = 0;       // whole size of the registered files (what registering
                                        // them whole would have pinned)
  std::uint64_t host_copy_bytes = 0;    // bytes uploads copied on the host first (0: they are sent
                                        // to the backend straight from the mapping)
};

// A dead gap between referenced bytes of one file at least this long splits
// its registration in two (docs/residency.md).
inline constexpr std::uint64_t kRegistrationSplitGap = std::uint64_t{64} << 20;

struct DeviceWeightsOptions {
  std::uint64_t split_gap_bytes = kRegistrationSplitGap;
  // Register mapped files even on a backend whose reads of registered memory
  // ballast cannot guard (Capabilities::guarded_host_reads false: lavapipe).
  // Off by default: a file truncated under such a registration kills the
  // process. An engine that never truncates its model files may turn it on
  // to keep zero-copy there (docs/reliability.md).
  bool register_unguarded = false;
};

class DeviceWeights final : public ModelResource<GpuBackend> {
 public:
  // `backend` and `store` must outlive this object.
  DeviceWeights(GpuBackend& backend, const WeightStore& store, std::string label = "source weights");
  DeviceWeights(GpuBackend& backend, const WeightStore& store, const DeviceWeightsOptions& options,
                std::string label = "source weights");
  // Releases whatever release() has not (see "Lifetime" above).
  ~DeviceWeights() override;
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // The device pointer of weight `id`: registered (zero-copy) or uploaded on
  // first use; the same pointer afterwards.
  Result<DevicePtr> resolve(ValueId id);
  // The same when the weight can be read in place; nullopt when resolve()
  // would upload it (inline, misaligned, or its file not registrable),
  // leaving the copy to the caller: Residency uploads those itself, under
  // its budget. The registration report counts them as it would (fallback
  // files, misaligned weights) but not as uploads.
  Result<std::optional<DevicePtr>> resolve_in_place(ValueId id);

  WeightResidency residency() const;

  // Names the device pointers resolve() hands out: process-unique, fresh
  // at construction and at every release(), after which resolve() uploads
  // and registers anew, and new allocations may reuse the old addresses.
  // A memo keyed by those pointers is right within one epoch only:
  // derive_weight() and derive_weights() tie their memo to it
  // (DerivedWeights::bind_sources).
  std::uint64_t epoch() const noexcept;

  std::string label() const override;
  // Frees the uploads and unregisters the registrations. Idempotent.
  Released release(GpuBackend& backend) override;

 private:
  struct BALLAST_HIDDEN Impl;
  Result<std::optional<DevicePtr>> locate(ValueId id, bool may_upload);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ballast

BALLAST_API_END
