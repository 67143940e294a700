// How `ballast derive` produces the device values of its plan. The command
// is one path (cmd_derive.cpp: load, plan, open, run, report, --dump,
// teardown); what differs with --residency is only this strategy:
//   memo       (derive_memo.cpp): each value through derive_weight and the
//              model's DerivedWeights memo, reported per kind with GB/s;
//   residency  (derive_residency.cpp): each value pinned through a
//              Residency, read back whole and hashed, then unpinned.
// Either writes each value to the same --dump files (support/derived_dump.hpp).
#pragma once

#include "support/derived_dump.hpp"

#include <ballast/derive.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <iosfwd>
#include <memory>
#include <span>
#include <string>

namespace ballast::cli {

class DeriveStrategy {
 public:
  virtual ~DeriveStrategy() = default;
  // Every planned value in order (`stems[i]`: plan[i]'s --dump file stem);
  // stops at the first error and returns it.
  virtual Status run(std::span<const PlannedDerivation> plan, std::span<const std::string> stems) = 0;
  // The report, before teardown: as text, or as the JSON keys that follow
  // the command's "model", "backend" and "device".
  virtual void print(std::ostream& out) const = 0;
  virtual nlohmann::ordered_json to_json() const = 0;
  // Releases everything it holds on the device.
  virtual TeardownReport teardown() = 0;
};

// `dump`: null without --dump; it, `model` and `gpu` outlive the strategy.
std::unique_ptr<DeriveStrategy> memo_strategy(Model& model, GpuBackend& gpu, DerivedDump* dump);

// `start`: when the command started (its time to the first derivation
// counts opening the model and the backend). Fails, with the context
// "creating the residency", when Residency::create refuses `options`.
Result<std::unique_ptr<DeriveStrategy>> residency_strategy(Model& model, GpuBackend& gpu, const ResidencyOptions& options,
                                                           std::chrono::steady_clock::time_point start,
                                                           DerivedDump* dump);

}  // namespace ballast::cli
