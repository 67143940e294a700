// The GGUF block kernels on CUDA and HIP (dequant_gguf, dequant_gguf_f32 and repack_gguf_int4), written once
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
#include <common/gguf_blocks.hpp>

#include <type_traits>

namespace ballast::gpu::elem {

// ------------------------------------------------------------ dequant_gguf
// One work item per group of eight outputs of a row (columns 8j..8j+7):
// every value from kmath::gguf::block_value, the shared arithmetic, with
// the block type a template argument so its switch folds to one case. A
// group lies in one block (blocks of 32 or 256 elements) or covers eight
// one-element blocks (the plain float types), so a thread decodes only
// its own block's scales, and neighbouring threads read neighbouring
// bytes. Wide launches (dst 16-byte aligned, cols % 8 == 0, so every row
// starts 16-byte aligned) store each group with one 16-byte store of f16
// or two of f32; otherwise element by element, up to the row's end.

static_assert(static_cast<uint32_t>(KernelType::q4_0) == kmath::gguf::kQ4_0 &&
                  static_cast<uint32_t>(KernelType::q8_0) == kmath::gguf::kQ8_0 &&
                  static_cast<uint32_t>(KernelType::q2_k) == kmath::gguf::kQ2_K &&
                  static_cast<uint32_t>(KernelType::q8_k) == kmath::gguf::kQ8_K &&
                  static_cast<uint32_t>(KernelType::bfloat16) == kmath::gguf::kBF16,
              "KernelType and kmath::gguf::Type number the block types alike");

template <KernelType T>
struct GgufGeometry {
  static constexpr uint32_t kElements = kinds::gguf_block(static_cast<DataType>(T))->elements;
  static constexpr uint32_t kBytes = kinds::gguf_block(static_cast<DataType>(T))->bytes;
  static_assert(kElements == 1 || kElements % 8 == 0, "a group of eight never straddles two blocks");
};

struct GgufShape {
  uint64_t rows, cols, groups_per_row, row_bytes;
  bool wide;     // dst 16-byte aligned and cols % 8 == 0: whole groups, 16-byte stores
  bool packets;  // wide and src 16-byte aligned: a plain float type's group in 16-byte loads, a K-quant's code bytes in
                 // words
};

template <KernelType T>
inline GgufShape gguf_shape(uint64_t rows, uint64_t cols, uint64_t src, uint64_t dst) {
  using G = GgufGeometry<T>;
  GgufShape s;
  s.rows = rows;
  s.cols = cols;
  s.groups_per_row = (cols + 7) / 8;
  s.row_bytes = cols / G::kElements * G::kBytes;  // cols is whole blocks (derivation_sizes checked it)
  s.wide = dst % 16 == 0 && cols % 8 == 0;
  // Plain types: a group is 16 or 32 bytes of the source, and rows of
  // cols % 8 == 0 elements keep every group 16-byte aligned. K-quants: every
  // block then starts at a multiple of 4 (Q2_K, Q4_K, Q5_K) or 2 (Q3_K,
  // Q6_K) bytes, and k_group reads its code bytes in words of that size.
  s.packets = s.wide && src % 16 == 0;
  return s;
}

// The value of column c0 + j of a row whose group starts at c0 (c0 % 8 == 0).
// HALF (block types) says what the caller knows of the group's place in its
// block: -1 nothing, 0 the first half, 1 the second. Every index is written
// so the compiler sees what the eight calls share: the position in the block
// is (a multiple of 8) | j, so i >> 5, i & 32 and the like fold to one value
// per group and each scale is decoded once, not once per element; and with
// the half known, the branches of block_value on it (sub-blocks 0..3 or
// 4..7 of Q4_K/Q5_K, the low or high nibbles of Q4_0, ...) fold too. (PTX
// instructions per 16 bytes: Q4_K 446 -> 147, Q4_0 153 -> 84.)
template <KernelType T, int HALF = -1>
BALLAST_HD inline float gguf_value(const uint8_t* __restrict__ row, uint64_t c0, uint32_t j) {
  using G = GgufGeometry<T>;
  constexpr uint32_t type = static_cast<uint32_t>(T);
  if constexpr (G::kElements == 1) {
    return kmath::gguf::block_value(type, row + (c0 + j) * G::kBytes, 0);
  } else {
    const uint8_t* block = row + c0 / G::kElements * G::kBytes;
    uint32_t i0 = static_cast<uint32_t>(c0 % G::kElements) & ~7u;  // ~7u: c0 % 8 == 0, said to the compiler
    if constexpr (HALF == 0) i0 &= G::kElements / 2 - 1;             // the caller knows i0 < E / 2
    if constexpr (HALF == 1) i0 |= G::kElements / 2;                 // ... or i0 >= E / 2
    return kmath::gguf::block_value(type, block, i0 | j);
  }
}

// Work item -> group of a row. Within each span of 64 groups, items 0..31
// take the first halves of the span's blocks and items 32..63 the second
// halves, so the 32 items of a warp (consecutive from a multiple of 32, when
// groups_per_row % 32 == 0) all take the same side of gguf_group_values'
// branch on the half; a warp still stores whole runs of 32 bytes or more
// (two groups of a half block of 32, sixteen of one of 256). The row's last
// span, if shorter, keeps the plain order. Plain float types: as is.
template <KernelType T>
BALLAST_HD inline uint64_t gguf_group_of_item(const GgufShape& s, uint64_t item) {
  using G = GgufGeometry<T>;
  if constexpr (G::kElements == 1) {
    return item;
  } else {
    constexpr uint64_t H = G::kElements / 16;  // groups per half block: 2 or 16
    const uint64_t span = item & ~uint64_t(63);
    if (span + 64 > s.groups_per_row) return item;
    const uint64_t half = (item >> 5) & 1, q = item & 31;
    return span + (q / H) * (2 * H) + half * H + q % H;
  }
}

// The eight values of a whole group starting at column c0 of `row`.
template <KernelType T, int HALF>
BALLAST_HD inline void gguf_group_values(const GgufShape& s, const uint8_t* __restrict__ row, uint64_t c0,
                                         float (&v)[8]) {
  using G = GgufGeometry<T>;
  if constexpr (G::kElements == 1) {
    // Byte loads of a plain f32/f16/bf16 source touch 8 (f32) or 4 cache
    // lines per warp instruction, 32 or 16 instructions per group: the L1
    // would bound the kernel below the copy. Aligned, the group is one or
    // two 16-byte loads, and block_value reads each element's bytes from
    // registers (every offset a constant after unrolling).
    if (s.packets) {
      constexpr uint32_t kPackets = 8 * G::kBytes / 16;
      Vec4 in[kPackets];
      const Vec4* p = reinterpret_cast<const Vec4*>(row + c0 * G::kBytes);
BALLAST_UNROLL
      for (uint32_t i = 0; i < kPackets; ++i) in[i] = load16(p + i);
      // Each element's bytes copied out of the words, not read through a
      // byte pointer into `in`: hipcc kept such an array in LDS.
BALLAST_UNROLL
      for (uint32_t j = 0; j < 8; ++j) {
        uint8_t e[G::kBytes];
BALLAST_UNROLL
        for (uint32_t k = 0; k < G::kBytes; ++k) {
          const uint32_t q = j * G::kBytes + k;  // byte of the group
          e[k] = static_cast<uint8_t>(word(in[q / 16], (q / 4) % 4) >> (8 * (q % 4)));
        }
        v[j] = kmath::gguf::block_value(static_cast<uint32_t>(T), e, 0);
      }
      return;
    }
  }
  if constexpr (G::kElements == 256) {  // the K-quants: each shared scale once (k_group)
    const uint8_t* block = row + c0 / G::kElements * G::kBytes;
    uint32_t i0 = static_cast<uint32_t>(c0 % G::kElements) & ~7u;
    if constexpr (HALF == 0) i0 &= G::kElements / 2 - 1;
    if constexpr (HALF == 1) i0 |= G::kElements / 2;
    // Blocks of a multiple of 4 bytes from a 16-byte aligned source are
    // 4-byte aligned; the rest (Q3_K 110, Q6_K 210) 2-byte aligned.
    constexpr uint32_t kAligned = G::kBytes % 4 == 0 ? 4 : 2;
    const bool done = s.packets ? kmath::gguf::k_group<kAligned>(static_cast<uint32_t>(T), block, i0, v)
                                : kmath::gguf::k_group<1>(static_cast<uint32_t>(T), block, i0, v);
    if (done) return;
  }
BALLAST_UNROLL
  for (uint32_t j = 0; j < 8; ++j) v[j] = gguf_value<T, HALF>(row, c0, j);
}

// A whole group from column c0 (HALF as for gguf_value): eight values and
// one 16-byte store of f16 or two of f32. tools/kernel-report's probes run
// this for one half, as one thread does.
template <KernelType T, class OUT, int HALF>
BALLAST_HD inline void gguf_store_group(const GgufShape& s, const uint8_t* __restrict__ row, uint64_t c0,
                                        OUT* __restrict__ out) {
  float v[8];
  gguf_group_values<T, HALF>(s, row, c0, v);
  if constexpr (sizeof(OUT) == 2) {
    *reinterpret_cast<Vec4*>(out) = vec4(hw_f16x2_from_f32(v[0], v[1]), hw_f16x2_from_f32(v[2], v[3]),
                                         hw_f16x2_from_f32(v[4], v[5]), hw_f16x2_from_f32(v[6], v[7]));
  } else {
    Vec4* o = reinterpret_cast<Vec4*>(out);
    o[0] = vec4(kmath::f32_bits(v[0]), kmath::f32_bits(v[1]), kmath::f32_bits(v[2]), kmath::f32_bits(v[3]));
    o[1] = vec4(kmath::f32_bits(v[4]), kmath::f32_bits(v[5]), kmath::f32_bits(v[6]), kmath::f32_bits(v[7]));
  }
}

// Work item `item` of row n (a group of eight outputs: gguf_group_of_item).
// OUT is uint16_t (f16 bits, dequant_gguf) or float (dequant_gguf_f32).
template <KernelType T, class OUT>
BALLAST_HD inline void gguf_group(const GgufShape& s, uint64_t n, uint64_t item, const uint8_t* __restrict__ src,
                                  OUT* __restrict__ dst) {
  const uint8_t* row = src + n * s.row_bytes;
  const uint64_t c0 = 8 * gguf_group_of_item<T>(s, item);
  OUT* out = dst + n * s.cols + c0;
  if (s.wide) {
    using G = GgufGeometry<T>;
    if constexpr (G::kElements == 1) {
      gguf_store_group<T, OUT, -1>(s, row, c0, out);
    } else if (c0 % G::kElements < G::kElements / 2) {  // uniform in a warp (gguf_group_of_item)
      gguf_store_group<T, OUT, 0>(s, row, c0, out);
    } else {
      gguf_store_group<T, OUT, 1>(s, row, c0, out);
    }
    return;
  }
  // The row's last group may be short (plain types: cols need not be a
  // multiple of 8); dst is aligned to its element size only.
  const uint32_t count = s.cols - c0 < 8 ? static_cast<uint32_t>(s.cols - c0) : 8u;
  for (uint32_t j = 0; j < count; ++j) {
    const float v = gguf_value<T>(row, c0, j);
    if constexpr (sizeof(OUT) == 2) {
      out[j] = hw_f16_from_f32(v);
    } else {
      out[j] = v;
    }
  }
}

// Calls f(std::integral_constant<KernelType, T>{}) for the block type t
// (host code: the kernels' enqueue and the CPU replay); false for a type
// the GGUF kinds do not read.
template <class F>
inline bool with_gguf_type(KernelType t, F&& f) {
#define BALLAST_GGUF_CASE_(name)                                  \
  case KernelType::name:                                          \
    f(std::integral_constant<KernelType, KernelType::name>{});    \
    return true;
  switch (t) {
    BALLAST_GGUF_CASE_(float32)
    BALLAST_GGUF_CASE_(float16)
    BALLAST_GGUF_CASE_(bfloat16)
    BALLAST_GGUF_CASE_(q4_0)
    BALLAST_GGUF_CASE_(q4_1)
    BALLAST_GGUF_CASE_(q5_0)
    BALLAST_GGUF_CASE_(q5_1)
    BALLAST_GGUF_CASE_(q8_0)
    BALLAST_GGUF_CASE_(q2_k)
    BALLAST_GGUF_CASE_(q3_k)
    BALLAST_GGUF_CASE_(q4_k)
    BALLAST_GGUF_CASE_(q5_k)
    BALLAST_GGUF_CASE_(q6_k)
    BALLAST_GGUF_CASE_(q8_k)
    default: return false;
  }
#undef BALLAST_GGUF_CASE_
}

// ------------------------------------------------------- repack_gguf_int4
// Q4_0 / Q4_1 blocks as stored into repack_int4's outputs: one work item
// per block (32 columns), its four words and its (scale, offset) pair, from
// kmath::gguf::q4_repack_word / q4_repack_pair with the block type a
// template argument so their type tests fold. Rows are whole blocks, so
// the blocks of all rows are one sequence: block i's source is at
// i * kBytes, its words at 4i, its pair at i. Wide launches (dst 16-byte
// aligned) store the words with one 16-byte store; otherwise word by word
// (bytes where a word is not 4-byte aligned). Pairs are 4-byte stores when
// dst2 is 4-byte aligned, bytes otherwise, as repack_int4's.
template <KernelType T>
BALLAST_HD inline void q4_repack_words(const uint8_t* __restrict__ block, uint32_t (&w)[4]) {
  constexpr uint32_t type = static_cast<uint32_t>(T);
BALLAST_UNROLL
  for (uint32_t j = 0; j < 4; ++j) w[j] = kmath::gguf::q4_repack_word(type, block, j);
}

template <KernelType T>
BALLAST_HD inline void q4_repack_block(const uint8_t* __restrict__ src, uint64_t i, uint32_t* __restrict__ words,
                                       uint32_t* __restrict__ pairs, bool wide, bool pairs_aligned) {
  static_assert(T == KernelType::q4_0 || T == KernelType::q4_1, "repack_gguf_int4 reads Q4_0 and Q4_1");
  using G = GgufGeometry<T>;
  const uint8_t* block = src + i * G::kBytes;
  uint32_t w[4];
  q4_repack_words<T>(block, w);
  uint32_t* o = words + 4 * i;
  if (wide) {
    *reinterpret_cast<Vec4*>(o) = vec4(w[0], w[1], w[2], w[3]);
  } else {
    for (unsigned j = 0; j < 4; ++j) {
      if (reinterpret_cast<uint64_t>(o + j) % 4 == 0) {
        o[j] = w[j];
      } else {
        uint8_t* ob = reinterpret_cast<uint8_t*>(o + j);
        for (unsigned k = 0; k < 4; ++k) ob[k] = static_cast<uint8_t>(w[j] >> (8 * k));
      }
    }
  }
  const uint32_t pair = kmath::gguf::q4_repack_pair(static_cast<uint32_t>(T), block);
  if (pairs_aligned) {
    pairs[i] = pair;
  } else {
    uint8_t* ob = reinterpret_cast<uint8_t*>(pairs + i);
    for (unsigned k = 0; k < 4; ++k) ob[k] = static_cast<uint8_t>(pair >> (8 * k));
  }
}

// Calls f(std::integral_constant<KernelType, T>{}) for Q4_0 or Q4_1; false
// for any other type.
template <class F>
inline bool with_q4_type(KernelType t, F&& f) {
  switch (t) {
    case KernelType::q4_0: f(std::integral_constant<KernelType, KernelType::q4_0>{}); return true;
    case KernelType::q4_1: f(std::integral_constant<KernelType, KernelType::q4_1>{}); return true;
    default: return false;
  }
}

}  // namespace ballast::gpu::elem

#if BALLAST_WITH_KERNELS
namespace ballast::gpu {
namespace {

// ------------------------------------------------------------ dequant_gguf
// One thread per group of eight outputs of a row (elem::gguf_group
// above), walked by a (row, group) cursor; one instantiation per block
// type and output type, so each kernel holds only its type's decoding.
template <KernelType T, class OUT>
__global__ void __launch_bounds__(kThreads)
    dequant_gguf_kernel(const uint8_t* __restrict__ src, OUT* __restrict__ dst, elem::GgufShape shape,
                        elem::Cursor stride) {
  for (elem::Cursor c = elem::cursor_at(blockIdx.x * kThreads + threadIdx.x, shape.groups_per_row); c.major < shape.rows;
       elem::cursor_step(c, stride, shape.groups_per_row))
    elem::gguf_group<T, OUT>(shape, c.major, c.minor, src, dst);
}

template <KernelType T, class OUT>
void enqueue_gguf(const KernelArgs& a, vendor::Stream stream) {
  const elem::GgufShape shape = elem::gguf_shape<T>(a.rows, a.cols, a.src, a.dst);
  const unsigned grid = grid_for(a.rows * shape.groups_per_row, kThreads);
  dequant_gguf_kernel<T, OUT><<<grid, kThreads, 0, stream>>>(reinterpret_cast<const uint8_t*>(a.src),
                                                             reinterpret_cast<OUT*>(a.dst), shape,
                                                             elem::cursor_at(grid * kThreads, shape.groups_per_row));
}

// -------------------------------------------------------- repack_gguf_int4
// One thread per Q4_0 / Q4_1 block (elem::q4_repack_block
// above): blocks of all rows are one flat sequence, so a plain
// grid-stride index walks them; neighbouring threads store neighbouring
// 16-byte word packets. One instantiation per block type.
template <KernelType T>
__global__ void __launch_bounds__(kThreads)
    repack_gguf_int4_kernel(const uint8_t* __restrict__ src, uint32_t* __restrict__ words,
                            uint32_t* __restrict__ pairs, uint64_t blocks, bool wide, bool pairs_aligned) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < blocks; i += stride)
    elem::q4_repack_block<T>(src, i, words, pairs, wide, pairs_aligned);
}

template <KernelType T>
void enqueue_repack_gguf(const KernelArgs& a, vendor::Stream stream) {
  const uint64_t blocks = a.rows * (a.cols / 32);
  const unsigned grid = grid_for(blocks, kThreads);
  repack_gguf_int4_kernel<T><<<grid, kThreads, 0, stream>>>(
      reinterpret_cast<const uint8_t*>(a.src), reinterpret_cast<uint32_t*>(a.dst), reinterpret_cast<uint32_t*>(a.dst2),
      blocks, aligned(a.dst, 16), aligned(a.dst2, 4));
}

// dequant_gguf and dequant_gguf_f32.
bool run_gguf(const KernelArgs& a, vendor::Stream stream) {
  if (a.rows * a.cols == 0) return false;
  const bool f32 = a.kind == Derivation::dequant_gguf_f32;
  // The host side accepted only the kinds' block types; any other enqueues nothing.
  return elem::with_gguf_type(a.src_type, [&](auto type) {
    constexpr KernelType kType = decltype(type)::value;
    if (f32) {
      enqueue_gguf<kType, float>(a, stream);
    } else {
      enqueue_gguf<kType, uint16_t>(a, stream);
    }
  });
}

bool run_dequant_gguf(const KernelArgs& a, vendor::Stream stream) { return run_gguf(a, stream); }
bool run_dequant_gguf_f32(const KernelArgs& a, vendor::Stream stream) { return run_gguf(a, stream); }

bool run_repack_gguf_int4(const KernelArgs& a, vendor::Stream stream) {
  if (a.rows * (a.cols / 32) == 0) return false;
  // The host side accepted only Q4_0 and Q4_1; any other enqueues nothing.
  return elem::with_q4_type(a.src_type, [&](auto type) { enqueue_repack_gguf<decltype(type)::value>(a, stream); });
}

}  // namespace
}  // namespace ballast::gpu
#endif

#ifdef BALLAST_HOST_REPLAY
namespace ballast::gpu::testing {

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

inline void replay_gguf(const KernelArgs& a) {
  if (a.rows * a.cols == 0) return;  // as run_gguf: nothing enqueued
  elem::with_gguf_type(a.src_type, [&](auto type) {
    constexpr KernelType kType = decltype(type)::value;
    if (a.kind == Derivation::dequant_gguf_f32) {
      gguf_on_host<kType, float>(a);
    } else {
      gguf_on_host<kType, uint16_t>(a);
    }
  });
}
inline void replay_dequant_gguf(const KernelArgs& a) { replay_gguf(a); }
inline void replay_dequant_gguf_f32(const KernelArgs& a) { replay_gguf(a); }

inline void replay_repack_gguf_int4(const KernelArgs& a) {
  if (a.rows * (a.cols / 32) == 0) return;  // as run_repack_gguf_int4: nothing enqueued
  elem::with_q4_type(a.src_type, [&](auto type) { repack_gguf_on_host<decltype(type)::value>(a); });
}

}  // namespace ballast::gpu::testing
#endif
