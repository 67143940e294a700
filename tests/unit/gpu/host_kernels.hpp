// The GPU kernels' per-thread bodies (backends/common/gpu/
// derivation_kernels.cuh, narrow paths) replayed on the CPU through the
// same derivation_elements.hpp / kernel_math.hpp functions: one "thread"
// per loop iteration, in the kernels' index order.
#pragma once

#include "gpu/derivation_elements.hpp"
#include "gpu/kernel_args.hpp"

#include <cstdint>
#include <cstring>

namespace ballast::gpu::testing {

inline void run_on_host(const KernelArgs& a) {
  using std::uint16_t;
  using std::uint32_t;
  using std::uint64_t;
  using std::uint8_t;
  const auto* src = reinterpret_cast<const uint8_t*>(a.src);
  switch (a.kind) {
    case KernelKind::transpose: {
      auto* dst = reinterpret_cast<uint8_t*>(a.dst);
      for (uint64_t r = 0; r < a.rows; ++r)
        for (uint64_t c = 0; c < a.cols; ++c)
          std::memcpy(dst + (c * a.rows + r) * a.element_bytes, src + (r * a.cols + c) * a.element_bytes, a.element_bytes);
      return;
    }
    case KernelKind::to_f16: {
      auto* dst = reinterpret_cast<uint16_t*>(a.dst);
      for (uint64_t i = 0; i < a.rows * a.cols; ++i) dst[i] = elem::to_f16_element(src, a.src_type, i);
      return;
    }
    case KernelKind::dequant_int4:
    case KernelKind::repack_int4: {
      const uint64_t kb = elem::int4_k_blocks(a.cols, a.block_size);
      const uint64_t row_bytes = elem::int4_row_bytes(kb, a.block_size);
      const uint64_t groups_per_row = (a.cols + 7) / 8;
      const void* scales = reinterpret_cast<const void*>(a.scales);
      const void* zps = reinterpret_cast<const void*>(a.zero_point);
      for (uint64_t g = 0; g < a.rows * groups_per_row; ++g) {
        const uint64_t n = g / groups_per_row, j = g % groups_per_row, k0 = 8 * j, block = k0 / a.block_size;
        const uint32_t codes = elem::load_u32_le(src + n * row_bytes + 4 * j);
        const float zp = elem::int4_zero_point(a.zero_points, zps, a.src_type, kb, n, block);
        if (a.kind == KernelKind::dequant_int4) {
          uint16_t h[8];
          elem::dequant_group(codes, zp, elem::int4_scale(scales, a.src_type, n * kb + block), h);
          auto* out = reinterpret_cast<uint16_t*>(a.dst) + n * a.cols + k0;
          for (uint64_t c = 0; c < 8 && k0 + c < a.cols; ++c) out[c] = h[c];
        } else {
          const uint32_t word = elem::repack_group(codes, a.cols - k0, zp);
          std::memcpy(reinterpret_cast<uint8_t*>(a.dst) + 4 * g, &word, 4);
        }
      }
      if (a.kind == KernelKind::repack_int4) {
        for (uint64_t i = 0; i < a.rows * kb; ++i) {
          const float zp = elem::int4_zero_point(a.zero_points, zps, a.src_type, kb, i / kb, i % kb);
          const uint32_t pair = kmath::repack_scale_pair(elem::int4_scale(scales, a.src_type, i), zp);
          std::memcpy(reinterpret_cast<uint8_t*>(a.dst2) + 4 * i, &pair, 4);
        }
      }
      return;
    }
    case KernelKind::quant_int8: {
      const uint64_t elem_bytes = a.src_type == KernelType::float16 ? 2 : 4;
      for (uint64_t n = 0; n < a.rows; ++n) {
        const uint8_t* row = src + n * a.cols * elem_bytes;
        float m = 0.0f;
        for (uint64_t k = 0; k < a.cols; ++k) m = kmath::abs_max_step(m, elem::quant_source(row, a.src_type, k));
        const float scale = kmath::quant_int8_scale(m);
        std::memcpy(reinterpret_cast<uint8_t*>(a.dst2) + 4 * n, &scale, 4);
        auto* codes = reinterpret_cast<std::int8_t*>(a.dst) + n * a.cols;
        for (uint64_t k = 0; k < a.cols; ++k) codes[k] = kmath::quant_int8_code(elem::quant_source(row, a.src_type, k), scale);
      }
      return;
    }
  }
}

}  // namespace ballast::gpu::testing
