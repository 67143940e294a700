// The one way a derived value is made on a device, for derive_weight(),
// derive_weights() and Residency: its output blocks obtained, its kernel
// launched, the wait, the in-place operands checked again; on any failure
// the blocks given back, so that a kernel that failed (even
// asynchronously) never leaves a value behind.
//
// The callers differ only in what is theirs to differ in: where output
// blocks come from and go back to (plain allocations for the memo; the
// budget, its pool and eviction for Residency), how operands are found
// (DeviceWeights; pinned entries), and when they wait (one value at a
// time, or a whole wave behind one synchronize: start() now, finish()
// after the caller's wait).
#pragma once

#include <ballast/derivation.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <functional>

namespace ballast::derive {

// Where a build's output blocks come from and where they go back.
class OutputBlocks {
 public:
  virtual ~OutputBlocks() = default;
  // dst (and dst2 for a pair) of `l`, sized by `sizes`: both or neither;
  // an error names what failed.
  virtual Status obtain(DerivationLaunch& l, const DerivationSizes& sizes) = 0;
  // A launch, or its wait, or the check after it failed: the blocks of `l`
  // go back (l.dst and l.dst2 are zero afterwards). Returns `failure`,
  // plus what could not be given back.
  virtual Status give_back(DerivationLaunch& l, const DerivationSizes& sizes, Status failure) = 0;
};

// Re-checks, after the wait, every operand the kernel read in place from a
// file's pages (a truncation meanwhile made it read zeros).
using RecheckOperands = std::function<Status()>;

// Blocks obtained and the kernel launched, without waiting. On failure
// nothing is held.
Status start(GpuBackend& gpu, DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks);

// After the caller's wait succeeded: the in-place operands checked again.
// On failure the blocks go back and the error says why.
Status finish(DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks, const RecheckOperands& recheck);

// One value: start(), synchronize, finish().
Status build_one(GpuBackend& gpu, DerivationLaunch& l, const DerivationSizes& sizes, OutputBlocks& blocks,
                 const RecheckOperands& recheck);

}  // namespace ballast::derive
