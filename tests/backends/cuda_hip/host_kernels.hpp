// The GPU kernels replayed on the CPU: each kind family's replay_<kind>
// (backends/cuda_hip/device/kinds_<family>.cuh, beside the kernel it
// mirrors) runs the same per-thread phase functions, with the same
// fast-path decisions, tile/chunk/row walks and shared-memory layouts,
// thread by thread and phase by phase (a barrier is the end of a loop over
// the block's threads). Only the lane shuffle of quant_int8's reduction is
// replaced by a plain maximum. Device-only hardware helpers run their host
// branch (kernel_math), proven equal in test_f16_exhaustive.
// run_on_host(args) dispatches by kind, from the kind list.
#pragma once

#define BALLAST_HOST_REPLAY 1
#include "cuda_hip/device/derivation_kernels.cuh"
