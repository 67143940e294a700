// The to_f16 kernels on CUDA and HIP (to_f16), written once
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

// ---------------------------------------------------------------- to_f16
// Eight elements -> one 16-byte packet of f16.
BALLAST_HD inline Vec4 to_f16_packet_f32(const Vec4& lo, const Vec4& hi) {
  return vec4(hw_f16x2_from_f32(kmath::f32_from_bits(lo.x), kmath::f32_from_bits(lo.y)),
              hw_f16x2_from_f32(kmath::f32_from_bits(lo.z), kmath::f32_from_bits(lo.w)),
              hw_f16x2_from_f32(kmath::f32_from_bits(hi.x), kmath::f32_from_bits(hi.y)),
              hw_f16x2_from_f32(kmath::f32_from_bits(hi.z), kmath::f32_from_bits(hi.w)));
}

BALLAST_HD inline uint32_t bf16x2_to_f16x2(uint32_t w) {
  return hw_f16x2_from_f32(kmath::f32_from_bits(w << 16), kmath::f32_from_bits(w & 0xffff0000u));
}

BALLAST_HD inline Vec4 to_f16_packet_bf16(const Vec4& in) {
  return vec4(bf16x2_to_f16x2(in.x), bf16x2_to_f16x2(in.y), bf16x2_to_f16x2(in.z), bf16x2_to_f16x2(in.w));
}

BALLAST_HD inline uint16_t to_f16_element(const void* src, KernelType type, uint64_t index) {
  if (type == KernelType::bfloat16)
    return hw_f16_from_f32(kmath::f32_from_bf16_bits(static_cast<const uint16_t*>(src)[index]));
  return hw_f16_from_f32(static_cast<const float*>(src)[index]);
}

}  // namespace ballast::gpu::elem

#if BALLAST_WITH_KERNELS
namespace ballast::gpu {
namespace {

// ------------------------------------------------------------------- to_f16
// Groups of eight elements: 16-byte stores of f16 (one or two 16-byte
// loads) when both operands are 16-byte aligned, element by element
// otherwise and for the tail. Hardware conversions.
template <class S>
__global__ void __launch_bounds__(kThreads)
    to_f16_kernel(const S* __restrict__ src, uint16_t* __restrict__ dst, uint64_t n, bool wide) {
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  uint64_t scalar_from = 0;
  if (wide) {
    const uint64_t groups = n / 8;
    const elem::Vec4* in = reinterpret_cast<const elem::Vec4*>(src);
    elem::Vec4* out = reinterpret_cast<elem::Vec4*>(dst);
    for (uint64_t g = first; g < groups; g += stride) {
      if constexpr (sizeof(S) == 2) {
        out[g] = elem::to_f16_packet_bf16(elem::load16(in + g));
      } else {
        out[g] = elem::to_f16_packet_f32(elem::load16(in + 2 * g), elem::load16(in + 2 * g + 1));
      }
    }
    scalar_from = groups * 8;
  }
  constexpr KernelType kType = sizeof(S) == 2 ? KernelType::bfloat16 : KernelType::float32;
  for (uint64_t i = scalar_from + first; i < n; i += stride) dst[i] = elem::to_f16_element(src, kType, i);
}

bool run_to_f16(const KernelArgs& a, vendor::Stream stream) {
  const uint64_t elements = a.rows * a.cols;
  if (elements == 0) return false;
  const bool wide = aligned(a.src, 16) && aligned(a.dst, 16);
  const unsigned grid = grid_for(wide ? elements / 8 + 1 : elements, kThreads);
  uint16_t* dst = reinterpret_cast<uint16_t*>(a.dst);
  if (a.src_type == KernelType::bfloat16) {
    to_f16_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(reinterpret_cast<const uint16_t*>(a.src), dst, elements, wide);
  } else {
    to_f16_kernel<float><<<grid, kThreads, 0, stream>>>(reinterpret_cast<const float*>(a.src), dst, elements, wide);
  }
  return true;
}

}  // namespace
}  // namespace ballast::gpu
#endif

#ifdef BALLAST_HOST_REPLAY
namespace ballast::gpu::testing {

// The kernel's two loops, one "thread".
inline void replay_to_f16(const KernelArgs& a) {
  const uint64_t n = a.rows * a.cols;
  auto* dst = reinterpret_cast<uint16_t*>(a.dst);
  const bool wide = a.src % 16 == 0 && a.dst % 16 == 0;
  uint64_t from = 0;
  if (wide) {
    const auto* in = reinterpret_cast<const elem::Vec4*>(a.src);
    auto* out = reinterpret_cast<elem::Vec4*>(a.dst);
    for (uint64_t g = 0; g < n / 8; ++g)
      out[g] = a.src_type == KernelType::bfloat16 ? elem::to_f16_packet_bf16(in[g])
                                                  : elem::to_f16_packet_f32(in[2 * g], in[2 * g + 1]);
    from = n / 8 * 8;
  }
  for (uint64_t i = from; i < n; ++i) dst[i] = elem::to_f16_element(reinterpret_cast<const void*>(a.src), a.src_type, i);
}

}  // namespace ballast::gpu::testing
#endif
