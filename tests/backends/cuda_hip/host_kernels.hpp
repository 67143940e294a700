// The GPU kernels (backends/common/gpu/derivation_kernels.cuh) replayed on
// the CPU: the same per-thread phase functions of derivation_elements.hpp,
// with the same fast-path decisions, tile/chunk/row walks and shared-memory
// layouts, run thread by thread and phase by phase (a barrier is the end of
// a loop over the block's threads). Only the lane shuffle of quant_int8's
// reduction is replaced by a plain maximum. Device-only hardware helpers
// run their host branch (kernel_math), proven equal in test_f16_exhaustive.
#pragma once

#include "cuda_hip/device/derivation_elements.hpp"
#include "cuda_hip/device/kernel_args.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

namespace ballast::gpu::testing {

template <class T>
void transpose_on_host(const KernelArgs& a) {
  using G = elem::TransposeGeometry<sizeof(T)>;
  const auto* src = reinterpret_cast<const T*>(a.src);
  auto* dst = reinterpret_cast<T*>(a.dst);
  const bool wide = elem::transpose_wide(a.src, a.dst, a.rows, a.cols, sizeof(T));
  std::vector<elem::Vec4> tile(G::kPackets);
  for (std::uint64_t r0 = 0; r0 < a.rows; r0 += G::TS) {
    for (std::uint64_t c0 = 0; c0 < a.cols; c0 += G::TS) {
      const bool fast = wide && r0 + G::TS <= a.rows && c0 + G::TS <= a.cols;
      for (unsigned t = 0; t < elem::kTransposeThreads; ++t) {
        if (fast) {
          elem::transpose_fast_load(src, a.cols, r0, c0, t, tile.data());
        } else {
          elem::transpose_edge_load(src, a.rows, a.cols, r0, c0, t, tile.data());
        }
      }
      for (unsigned t = 0; t < elem::kTransposeThreads; ++t) {
        if (fast) {
          elem::transpose_fast_store(dst, a.rows, r0, c0, t, tile.data());
        } else {
          elem::transpose_edge_store(dst, a.rows, a.cols, r0, c0, t, tile.data());
        }
      }
    }
  }
}

template <class S>
void int4_on_host(const KernelArgs& a) {
  const bool repack = a.kind == Derivation::repack_int4;
  const elem::Int4Shape shape = elem::int4_shape<S>(a.rows, a.cols, a.block_size, a.zero_points, a.src, a.dst, repack);
  const auto* b = reinterpret_cast<const std::uint8_t*>(a.src);
  const auto* scales = reinterpret_cast<const S*>(a.scales);
  const auto* zps = reinterpret_cast<const std::uint8_t*>(a.zero_point);
  // The kernels' cursor walk with a small "grid" of 7 threads, so the
  // stride's carry is exercised.
  constexpr std::uint32_t kThreads = 7;
  if (!repack && shape.wide) {  // dequant_int4_groups_kernel
    const elem::Cursor stride = elem::cursor_at(kThreads, shape.groups_per_row);
    for (std::uint32_t t = 0; t < kThreads; ++t)
      for (elem::Cursor c = elem::cursor_at(t, shape.groups_per_row); c.major < shape.rows;
           elem::cursor_step(c, stride, shape.groups_per_row))
        elem::dequant_group_wide(shape, c.major, c.minor, b, scales, zps, reinterpret_cast<std::uint16_t*>(a.dst));
    return;
  }
  const elem::Cursor stride = elem::cursor_at(kThreads, shape.chunks_per_row);
  for (std::uint32_t t = 0; t < kThreads; ++t) {
    for (elem::Cursor c = elem::cursor_at(t, shape.chunks_per_row); c.major < shape.rows;
         elem::cursor_step(c, stride, shape.chunks_per_row)) {
      if (repack) {
        elem::repack_chunk(shape, c.major, c.minor, b, scales, zps, reinterpret_cast<std::uint32_t*>(a.dst),
                           reinterpret_cast<std::uint32_t*>(a.dst2), a.dst2 % 4 == 0);
      } else {
        elem::dequant_chunk(shape, c.major, c.minor, b, scales, zps, reinterpret_cast<std::uint16_t*>(a.dst));
      }
    }
  }
}

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
    const elem::QuantScale scale = elem::quant_scale(row_max);
    elem::store_f32_bytes(scales + 4 * n, scale.scale);
    for (unsigned t = 0; t < THREADS; ++t)
      elem::quant_pass2<S, THREADS>(row, a.cols, slabs, t, threads[t], scale, codes + n * a.cols);
  }
}

// dequant_gguf_kernel's cursor walk, with the same small grid as the int4
// replay (7 threads, so the stride's carry is exercised).
template <KernelType T, class OUT>
void gguf_on_host(const KernelArgs& a) {
  const elem::GgufShape shape = elem::gguf_shape<T>(a.rows, a.cols, a.src, a.dst);
  constexpr std::uint32_t kThreads = 7;
  const elem::Cursor stride = elem::cursor_at(kThreads, shape.groups_per_row);
  for (std::uint32_t t = 0; t < kThreads; ++t)
    for (elem::Cursor c = elem::cursor_at(t, shape.groups_per_row); c.major < shape.rows;
         elem::cursor_step(c, stride, shape.groups_per_row))
      elem::gguf_group<T, OUT>(shape, c.major, c.minor, reinterpret_cast<const std::uint8_t*>(a.src),
                               reinterpret_cast<OUT*>(a.dst));
}

// repack_gguf_int4_kernel's grid-stride walk over the blocks, with 7
// threads as above.
template <KernelType T>
void repack_gguf_on_host(const KernelArgs& a) {
  const std::uint64_t blocks = a.rows * (a.cols / 32);
  const bool wide = a.dst % 16 == 0, pairs_aligned = a.dst2 % 4 == 0;
  constexpr std::uint32_t kThreads = 7;
  for (std::uint32_t t = 0; t < kThreads; ++t)
    for (std::uint64_t i = t; i < blocks; i += kThreads)
      elem::q4_repack_block<T>(reinterpret_cast<const std::uint8_t*>(a.src), i, reinterpret_cast<std::uint32_t*>(a.dst),
                               reinterpret_cast<std::uint32_t*>(a.dst2), wide, pairs_aligned);
}

inline void run_on_host(const KernelArgs& a) {
  using std::uint16_t;
  using std::uint64_t;
  switch (a.kind) {
    case Derivation::transpose:
      switch (a.element_bytes) {
        case 1: transpose_on_host<std::uint8_t>(a); break;
        case 2: transpose_on_host<uint16_t>(a); break;
        case 4: transpose_on_host<std::uint32_t>(a); break;
        default: transpose_on_host<uint64_t>(a); break;
      }
      return;
    case Derivation::to_f16: {
      // The kernel's two loops, one "thread".
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
      return;
    }
    case Derivation::dequant_int4:
    case Derivation::repack_int4:
      if (a.src_type == KernelType::float16) {
        int4_on_host<uint16_t>(a);
      } else {
        int4_on_host<float>(a);
      }
      return;
    case Derivation::quant_int8: {
      const bool f16 = a.src_type == KernelType::float16;
      if (a.cols >= 4096) {
        f16 ? quant_int8_on_host<uint16_t, 256>(a) : quant_int8_on_host<float, 256>(a);
      } else {
        f16 ? quant_int8_on_host<uint16_t, 64>(a) : quant_int8_on_host<float, 64>(a);
      }
      return;
    }
    case Derivation::dequant_gguf:
    case Derivation::dequant_gguf_f32:
      if (a.rows * a.cols == 0) return;  // as run_gguf: nothing enqueued
      elem::with_gguf_type(a.src_type, [&](auto type) {
        constexpr KernelType kType = decltype(type)::value;
        if (a.kind == Derivation::dequant_gguf_f32) {
          gguf_on_host<kType, float>(a);
        } else {
          gguf_on_host<kType, uint16_t>(a);
        }
      });
      return;
    case Derivation::repack_gguf_int4:
      if (a.rows * (a.cols / 32) == 0) return;  // as run_repack_gguf: nothing enqueued
      elem::with_q4_type(a.src_type, [&](auto type) { repack_gguf_on_host<decltype(type)::value>(a); });
      return;
  }
}

}  // namespace ballast::gpu::testing
