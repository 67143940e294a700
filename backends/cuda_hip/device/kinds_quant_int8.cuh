// The quant_int8 kernels on CUDA and HIP (quant_int8 and
// quant_int8_given_max, whose rows' maxima are read, not reduced), written once
// for nvcc and hipcc. One file per kind family, in three parts:
//   elem::   each thread's work between two barriers, plain functions
//            compiled for host and device;
//   kernels  the kernels, their launches and run_<kind>(), the row that
//            derivation_kernels.cuh's dispatch takes for each kind (nvcc
//            and hipcc only);
//   replay   replay_<kind>(): the kernels' walks run on the CPU thread by
//            thread, phase by phase, over the same elem:: functions
//            (BALLAST_HOST_REPLAY: tests/backends/cuda_hip), checked against
//            the scalar reference.
// The replay sits beside the kernel it mirrors, so a change to one is made
// next to the other, and a kind of this family is added here and nowhere
// else in backends/cuda_hip (docs/architecture.md).
#pragma once

#include "cuda_hip/device/derivation_elements.hpp"

namespace ballast::gpu::elem {

// ------------------------------------------------------------ quant_int8
// One row per block of THREADS threads. Fast path (the row in 16-element
// slabs: source and codes 16-byte aligned, K % 16 == 0): each thread loads
// its slabs (slab t, t + THREADS, ...) with 16-byte loads, the first kept
// in registers for the second pass, and writes each slab's 16 codes with
// one 16-byte store. Otherwise element by element (both passes read the
// source).

template <class S>
struct QuantSlab {
  static constexpr unsigned kPackets = sizeof(S) == 4 ? 4 : 2;  // 16-byte packets per 16 elements
  Vec4 v[kPackets];
};

template <class S>
BALLAST_HD inline float quant_slab_element(const QuantSlab<S>& s, unsigned e) {
  if constexpr (sizeof(S) == 4) {
    return kmath::f32_from_bits(word(s.v[e >> 2], e & 3));
  } else {
    return hw_f32_from_f16(static_cast<uint16_t>(word(s.v[e >> 3], (e >> 1) & 3) >> (16 * (e & 1))));
  }
}

template <class S>
BALLAST_HD inline QuantSlab<S> quant_load_slab(const S* row, uint64_t slab) {
  QuantSlab<S> s;
  const Vec4* p = reinterpret_cast<const Vec4*>(row + 16 * slab);
BALLAST_UNROLL
  for (unsigned i = 0; i < QuantSlab<S>::kPackets; ++i) s.v[i] = load16(p + i);
  return s;
}

template <class S>
BALLAST_HD inline float quant_slab_max(const QuantSlab<S>& s, float m) {
BALLAST_UNROLL
  for (unsigned e = 0; e < 16; ++e) m = hw_abs_max(m, quant_slab_element(s, e));
  return m;
}

// The codes of a slab by the reciprocal; sets `exact` if any element
// needs the division (then the caller recomputes the slab).
template <class S>
BALLAST_HD inline Vec4 quant_slab_codes_fast(const QuantSlab<S>& s, float inv, bool& exact) {
  uint32_t w[4];
BALLAST_UNROLL
  for (unsigned i = 0; i < 4; ++i) {
    w[i] = quant_code_fast(quant_slab_element(s, 4 * i), inv, exact) |
           (quant_code_fast(quant_slab_element(s, 4 * i + 1), inv, exact) << 8) |
           (quant_code_fast(quant_slab_element(s, 4 * i + 2), inv, exact) << 16) |
           (quant_code_fast(quant_slab_element(s, 4 * i + 3), inv, exact) << 24);
  }
  return vec4(w[0], w[1], w[2], w[3]);
}

template <class S>
BALLAST_HD inline float quant_element(const S* row, uint64_t k) {
  if constexpr (sizeof(S) == 4) {
    return row[k];
  } else {
    return hw_f32_from_f16(row[k]);
  }
}

// The codes of slab `slab` of `row` by the exact division, element by
// element from memory (cached), in a loop kept rolled so the long division
// sequence exists once.
template <class S>
BALLAST_HD inline Vec4 quant_slab_codes_exact(const S* row, uint64_t slab, float scale) {
  uint32_t w0 = 0, w1 = 0, w2 = 0, w3 = 0;
  const S* p = row + 16 * slab;
BALLAST_NO_UNROLL
  for (unsigned e = 0; e < 16; ++e) {
    const uint32_t code = hw_quant_code(quant_element(p, e), scale) << (8 * (e & 3));
    const unsigned i = e >> 2;
    w0 |= i == 0 ? code : 0u;
    w1 |= i == 1 ? code : 0u;
    w2 |= i == 2 ? code : 0u;
    w3 |= i == 3 ? code : 0u;
  }
  return vec4(w0, w1, w2, w3);
}

// Per-thread state between the two passes: the thread's first slab stays
// in registers (K <= 16 * THREADS: the whole row); later slabs (longer
// rows) are read again in pass 2, mostly from L2. (Selecting between the
// cached and a loaded slab in one loop made HIP keep the slab in private
// memory behind flat accesses.)
template <class S>
struct QuantThread {
  QuantSlab<S> cached;
  float max_abs = 0.0f;
};

// Pass 1 of one thread over row `row` (K elements).
template <class S, unsigned THREADS>
BALLAST_HD inline void quant_pass1(const S* __restrict__ row, uint64_t cols, bool slabs, unsigned thread,
                                   QuantThread<S>& t) {
  float m = 0.0f;
  if (slabs) {
    const uint64_t count = cols / 16;
    if (thread < count) {
      t.cached = quant_load_slab(row, thread);
      m = quant_slab_max(t.cached, m);
    }
    for (uint64_t slab = thread + THREADS; slab < count; slab += THREADS) m = quant_slab_max(quant_load_slab(row, slab), m);
  } else {
    for (uint64_t k = thread; k < cols; k += THREADS) m = hw_abs_max(m, quant_element(row, k));
  }
  t.max_abs = m;
}

// Pass 2: the codes of row `row` from the row's scale.
template <class S, unsigned THREADS>
BALLAST_HD inline void quant_pass2(const S* __restrict__ row, uint64_t cols, bool slabs, unsigned thread,
                                   const QuantThread<S>& t, const QuantScale& scale, uint8_t* __restrict__ codes) {
  if (slabs) {
    const uint64_t count = cols / 16;
    Vec4* out = reinterpret_cast<Vec4*>(codes);
    // Codes by the reciprocal; if any of the thread's elements needs the
    // exact division (rare), its slabs are redone once, in one place (more
    // copies of the division cost HIP scalar-register spills).
    bool exact = !scale.inv_ok;
    if (thread < count) out[thread] = quant_slab_codes_fast(t.cached, scale.inv, exact);
    for (uint64_t slab = thread + THREADS; slab < count; slab += THREADS)
      out[slab] = quant_slab_codes_fast(quant_load_slab(row, slab), scale.inv, exact);
    if (exact) {
      for (uint64_t slab = thread; slab < count; slab += THREADS) out[slab] = quant_slab_codes_exact(row, slab, scale.scale);
    }
  } else {
    for (uint64_t k = thread; k < cols; k += THREADS)
      codes[k] = static_cast<uint8_t>(quant_code_by_inverse(quant_element(row, k), scale.scale, scale.inv, scale.inv_ok));
  }
}

inline bool quant_slabs(uint64_t src, uint64_t dst, uint64_t cols) {
  return src % 16 == 0 && dst % 16 == 0 && cols % 16 == 0;
}

BALLAST_HD inline void store_f32_bytes(uint8_t* out, float value) {
  const uint32_t bits = kmath::f32_bits(value);
  if (reinterpret_cast<uint64_t>(out) % 4 == 0) {
    *reinterpret_cast<uint32_t*>(out) = bits;
  } else {
    for (unsigned i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(bits >> (8 * i));
  }
}

}  // namespace ballast::gpu::elem

#if BALLAST_WITH_KERNELS
namespace ballast::gpu {
namespace {

// --------------------------------------------------------------- quant_int8
// One block per row (grid-stride over rows). Pass 1 loads the thread's
// slabs (16-byte loads, kept in registers) and takes max|w|; the block
// reduces with lane shuffles inside groups of 32 lanes (right for 32- and
// 64-wide wavefronts) and one shared-memory step across groups; pass 2
// writes the codes from the registers, 16 per 16-byte store.
// Residency hint: 1024 threads per SM for f32 rows (registers capped at
// 64), 1280 for f16 (51), which every target fits; without it ptxas for
// sm_120 chose 48 registers for f32 and spilled 4 bytes.
template <class S, unsigned THREADS, bool SLABS>
__global__ void __launch_bounds__(THREADS, (sizeof(S) == 2 ? 1280 : 1024) / THREADS)
    quant_int8_kernel(const S* __restrict__ src, uint8_t* __restrict__ codes, uint8_t* __restrict__ scales,
                      uint64_t rows, uint64_t cols, const float* __restrict__ given) {
  constexpr bool slabs = SLABS;
  constexpr unsigned kGroups = THREADS / 32;
  __shared__ float partial[2][kGroups];
  unsigned parity = 0;
  for (uint64_t n = blockIdx.x; n < rows; n += gridDim.x, parity ^= 1u) {
    const S* row = src + n * cols;
    elem::QuantThread<S> t;
    elem::quant_pass1<S, THREADS>(row, cols, slabs, threadIdx.x, t);
    float m = t.max_abs;
#pragma unroll
    for (unsigned lanes = 16; lanes > 0; lanes /= 2) m = fmaxf(m, vendor::shfl_xor(m, lanes));
    if (threadIdx.x % 32 == 0) partial[parity][threadIdx.x / 32] = m;
    __syncthreads();  // partial[parity] is not written again before the next row's barrier
    float row_max = partial[parity][0];
#pragma unroll
    for (unsigned g = 1; g < kGroups; ++g) row_max = fmaxf(row_max, partial[parity][g]);
    // quant_int8_given_max: the row's maximum as given (pass 1 still
    // loads the thread's slabs for pass 2; its maximum is not used).
    if (given != nullptr) row_max = kmath::given_row_max(given[n]);
    const elem::QuantScale scale = elem::quant_scale(row_max);
    if (threadIdx.x == 0) elem::store_f32_bytes(scales + 4 * n, scale.scale);
    elem::quant_pass2<S, THREADS>(row, cols, slabs, threadIdx.x, t, scale, codes + n * cols);
  }
}

template <class S>
void enqueue_quant_int8(const KernelArgs& a, vendor::Stream stream) {
  const unsigned grid = grid_for(a.rows, 1);
  const S* src = reinterpret_cast<const S*>(a.src);
  auto* codes = reinterpret_cast<uint8_t*>(a.dst);
  auto* scales = reinterpret_cast<uint8_t*>(a.dst2);
  const auto* given = a.kind == Derivation::quant_int8_given_max ? reinterpret_cast<const float*>(a.scales) : nullptr;
  const bool slabs = elem::quant_slabs(a.src, a.dst, a.cols);
  // Short rows would leave most of a 256-thread block idle.
  // One path per kernel (a run-time flag would keep both paths' scalar
  // state live: HIP spilled scalar registers).
  if (a.cols >= 4096) {
    if (slabs) {
      quant_int8_kernel<S, 256, true><<<grid, 256, 0, stream>>>(src, codes, scales, a.rows, a.cols, given);
    } else {
      quant_int8_kernel<S, 256, false><<<grid, 256, 0, stream>>>(src, codes, scales, a.rows, a.cols, given);
    }
  } else if (slabs) {
    quant_int8_kernel<S, 64, true><<<grid, 64, 0, stream>>>(src, codes, scales, a.rows, a.cols, given);
  } else {
    quant_int8_kernel<S, 64, false><<<grid, 64, 0, stream>>>(src, codes, scales, a.rows, a.cols, given);
  }
}

bool run_quant_int8(const KernelArgs& a, vendor::Stream stream) {
  if (a.rows == 0) return false;
  if (a.src_type == KernelType::float16) {
    enqueue_quant_int8<uint16_t>(a, stream);
  } else {
    enqueue_quant_int8<float>(a, stream);
  }
  return true;
}

// The same kernel, each row's maximum read from a.scales. A given maximum
// may be below the row's own: quant_code_fast sends quotients past 127 to
// the exact division, which clamps.
bool run_quant_int8_given_max(const KernelArgs& a, vendor::Stream stream) { return run_quant_int8(a, stream); }

}  // namespace
}  // namespace ballast::gpu
#endif

#ifdef BALLAST_HOST_REPLAY
#include <vector>

namespace ballast::gpu::testing {

template <class S, unsigned THREADS>
void quant_int8_on_host(const KernelArgs& a) {
  const auto* src = reinterpret_cast<const S*>(a.src);
  auto* codes = reinterpret_cast<std::uint8_t*>(a.dst);
  auto* scales = reinterpret_cast<std::uint8_t*>(a.dst2);
  const bool slabs = elem::quant_slabs(a.src, a.dst, a.cols);
  std::vector<elem::QuantThread<S>> threads(THREADS);
  for (std::uint64_t n = 0; n < a.rows; ++n) {
    const S* row = src + n * a.cols;
    float row_max = 0.0f;
    for (unsigned t = 0; t < THREADS; ++t) {
      elem::quant_pass1<S, THREADS>(row, a.cols, slabs, t, threads[t]);
      row_max = elem::hw_abs_max(row_max, threads[t].max_abs);
    }
    if (a.kind == Derivation::quant_int8_given_max)
      row_max = kmath::given_row_max(reinterpret_cast<const float*>(a.scales)[n]);
    const elem::QuantScale scale = elem::quant_scale(row_max);
    elem::store_f32_bytes(scales + 4 * n, scale.scale);
    for (unsigned t = 0; t < THREADS; ++t)
      elem::quant_pass2<S, THREADS>(row, a.cols, slabs, t, threads[t], scale, codes + n * a.cols);
  }
}

inline void replay_quant_int8(const KernelArgs& a) {
  const bool f16 = a.src_type == KernelType::float16;
  if (a.cols >= 4096) {
    f16 ? quant_int8_on_host<uint16_t, 256>(a) : quant_int8_on_host<float, 256>(a);
  } else {
    f16 ? quant_int8_on_host<uint16_t, 64>(a) : quant_int8_on_host<float, 64>(a);
  }
}
inline void replay_quant_int8_given_max(const KernelArgs& a) { replay_quant_int8(a); }

}  // namespace ballast::gpu::testing
#endif
