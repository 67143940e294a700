// The derivation kernels, written once for nvcc and hipcc: each kind
// family's kernels and their host replay are in kinds_<family>.cuh, and
// this file joins them into one dispatch. A translation unit includes its
// vendor header (vendor_cuda.hpp / vendor_hip.hpp) and then this file;
// backends/cuda_hip/cuda/cuda_kernels.cu and backends/cuda_hip/hip/
// hip_kernels.hip are nothing more than that. The CPU tests define
// BALLAST_HOST_REPLAY and include it with the host compiler, which sees the
// per-thread functions and run_on_host() only.
//
// Shape of every kernel: a grid-stride loop over 64-bit work items, so any
// size is covered by a capped grid (never truncated, never an overflowing
// grid dimension); wide (16-byte) loads and stores where the operand
// addresses allow, which a uniform run-time test decides per launch or per
// row; per-element arithmetic from kernel_math.hpp and the families'
// elem:: functions, shared with the CPU backend and the CPU tests.
#pragma once

#include "cuda_hip/device/derivation_elements.hpp"
#include "cuda_hip/device/kernel_args.hpp"
#include "cuda_hip/device/kinds_gguf.cuh"
#include "cuda_hip/device/kinds_int4.cuh"
#include "cuda_hip/device/kinds_quant_int8.cuh"
#include "cuda_hip/device/kinds_slice.cuh"
#include "cuda_hip/device/kinds_to_f16.cuh"
#include "cuda_hip/device/kinds_transpose.cuh"

#if BALLAST_WITH_KERNELS
namespace ballast::gpu {
namespace {

// One row per derivation kind, built from the kind list: run_<kind>
// returns false when the launch has nothing to do (no kernel enqueued). A
// kind without its run_<kind> in a family file fails to compile here.
struct EnqueueRow {
  Derivation kind;
  bool (*run)(const KernelArgs&, vendor::Stream);
};
#define BALLAST_GPU_ENQUEUE_ROW(name) EnqueueRow{Derivation::name, run_##name},
constexpr EnqueueRow kEnqueue[] = {BALLAST_DERIVATION_KINDS(BALLAST_GPU_ENQUEUE_ROW)};
#undef BALLAST_GPU_ENQUEUE_ROW
static_assert(kinds::covers_every_kind(kEnqueue), "the CUDA/HIP kernels need one row per derivation kind");

}  // namespace

int enqueue_derivation(const KernelArgs& a, void* stream_handle) {
  const auto stream = static_cast<vendor::Stream>(stream_handle);
  // The runtime's last-error slot still holds any earlier failed call (an
  // allocation refused as out of memory, say), already reported to its
  // caller; drop it, so what is read after the launch is this launch's own.
  // (Found on an H200: a refused cudaMalloc made the next launch fail.)
  static_cast<void>(vendor::take_launch_error());
  if (!kEnqueue[static_cast<int>(a.kind)].run(a, stream)) return 0;
  return vendor::take_launch_error();
}

}  // namespace ballast::gpu
#endif

#ifdef BALLAST_HOST_REPLAY
namespace ballast::gpu::testing {

// The same dispatch on the CPU: replay_<kind> of every kind, from the list.
struct ReplayRow {
  Derivation kind;
  void (*run)(const KernelArgs&);
};
#define BALLAST_GPU_REPLAY_ROW(name) ReplayRow{Derivation::name, replay_##name},
inline constexpr ReplayRow kReplay[] = {BALLAST_DERIVATION_KINDS(BALLAST_GPU_REPLAY_ROW)};
#undef BALLAST_GPU_REPLAY_ROW
static_assert(kinds::covers_every_kind(kReplay), "every CUDA/HIP kind needs its host replay");

inline void run_on_host(const KernelArgs& a) { kReplay[static_cast<int>(a.kind)].run(a); }

}  // namespace ballast::gpu::testing
#endif
