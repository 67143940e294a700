// ModelResource and TeardownHost: how a model gives back everything it put
// on a device.
//
//   struct Model {
//     GpuBackend& gpu;
//     DerivedWeights derived;            // a ModelResource<GpuBackend>
//     TeardownHost<GpuBackend> host{gpu}; // declared last: destroyed first
//     Model(GpuBackend& g) : gpu(g) { host.add(derived); }
//   };
//   TeardownReport report = model.host.teardown(model.gpu);
//   if (!report.ok()) log(report.to_string());
//
// Protocol (docs/derived_weights.md, "Teardown"):
//   - resources are released in REVERSE order of registration (what was
//     built last from earlier resources goes first);
//   - a failing resource does not stop the others; every outcome lands in
//     the report;
//   - release() is idempotent: the host calls it, and a destructor backstop
//     may call it again, which then frees nothing and succeeds.
#pragma once

#include <ballast/export.hpp>
#include <ballast/status.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

// What one release() call gave back.
struct [[nodiscard]] Released {
  Status status;                      // ok, or the FIRST failure (the message counts the rest)
  std::uint64_t bytes_freed = 0;      // bytes actually returned to the backend
  std::uint64_t allocations_freed = 0;
  std::uint64_t failed_frees = 0;     // frees the backend refused
};

template <class Backend>
class ModelResource {
 public:
  virtual ~ModelResource() = default;

  // A human name for the teardown report and for attributing a failure.
  virtual std::string label() const = 0;

  // Releases everything the resource owns on `backend`. Idempotent: after it
  // returns the resource owns nothing, even when some frees failed (those are
  // reported, not retried), so a second call frees nothing and succeeds.
  // The one exception: a resource that knows its backend (DeviceWeights,
  // Residency, a DerivedWeights tied by derive) refuses a release on
  // another one whole, invalid_argument, owning all it did.
  // Must not throw.
  virtual Released release(Backend& backend) = 0;
};

// One resource's line in the report.
struct TeardownEntry {
  std::string label;
  Status status;
  std::uint64_t bytes_freed = 0;
  std::uint64_t allocations_freed = 0;
  std::uint64_t failed_frees = 0;
};

struct TeardownReport {
  std::vector<TeardownEntry> entries;  // in release order (reverse registration)

  bool ok() const noexcept;
  std::uint64_t bytes_freed() const noexcept;
  std::uint64_t allocations_freed() const noexcept;
  std::size_t failed_resources() const noexcept;
  // The first failure, with the resource it came from as context; ok if none.
  Status status() const;
  // One aligned block: a summary line, one row per resource, a total row.
  std::string to_string() const;
};

// A model registers its resources here; teardown() releases them.
//
// The host does not own the resources: each must stay alive until the host
// has torn down or been destroyed (declare the host after the resources it
// holds, so it is destroyed first). Registering one resource twice registers
// it once. add() and teardown() may be called from different threads.
//
// Destructor backstop: a host built with a backend tears down on that
// backend when it is destroyed without teardown() having run since the last
// add(); the report is then discarded, so call teardown() to see it. A host
// built without a backend releases nothing on destruction.
template <class Backend>
class TeardownHost {
 public:
  TeardownHost() = default;
  explicit TeardownHost(Backend& backstop) : backstop_(&backstop) {}
  TeardownHost(const TeardownHost&) = delete;
  TeardownHost& operator=(const TeardownHost&) = delete;

  ~TeardownHost() {
    if (backstop_ != nullptr && pending_) static_cast<void>(teardown(*backstop_));
  }

  void add(ModelResource<Backend>& resource) {
    std::lock_guard lock(mutex_);
    if (std::find(resources_.begin(), resources_.end(), &resource) == resources_.end()) resources_.push_back(&resource);
    pending_ = true;
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return resources_.size();
  }

  // Releases every registered resource, last registered first, and keeps
  // going past failures. Resources stay registered: tearing down again
  // calls each (idempotent) release once more.
  TeardownReport teardown(Backend& backend) {
    std::vector<ModelResource<Backend>*> order;
    {
      std::lock_guard lock(mutex_);
      order.assign(resources_.rbegin(), resources_.rend());
      pending_ = false;
    }
    TeardownReport report;
    report.entries.reserve(order.size());
    for (ModelResource<Backend>* resource : order) report.entries.push_back(release_one(*resource, backend));
    return report;
  }

 private:
  // Resources must not throw; one that does is reported, not propagated,
  // so the rest still get released.
  static TeardownEntry release_one(ModelResource<Backend>& resource, Backend& backend) {
    TeardownEntry entry;
    try {
      entry.label = resource.label();
      Released released = resource.release(backend);
      entry.status = std::move(released.status);
      entry.bytes_freed = released.bytes_freed;
      entry.allocations_freed = released.allocations_freed;
      entry.failed_frees = released.failed_frees;
    } catch (const std::exception& e) {
      entry.status = make_error(ErrorCode::internal, std::string("release threw: ") + e.what());
    } catch (...) {
      entry.status = make_error(ErrorCode::internal, "release threw a non-standard exception");
    }
    if (entry.label.empty()) entry.label = "(unnamed)";
    return entry;
  }

  mutable std::mutex mutex_;
  std::vector<ModelResource<Backend>*> resources_;
  Backend* backstop_ = nullptr;
  bool pending_ = false;
};

}  // namespace ballast

BALLAST_API_END
