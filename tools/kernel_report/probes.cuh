// Probe kernels for tools/kernel-report: each runs exactly one fast-path
// work unit of one derivation kernel for one thread (no loops around it),
// so the static instruction count of the probe is the dynamic count per
// unit, and `bytes_written` per unit gives instructions per 16 bytes
// written. The vendor header comes first (probes.cu / probes.hip).
//
// BALLAST_PROBE_BASELINE compiles the same units against the kernel
// sources before issue 14 (checked out by `tools/kernel-report --rev`):
// those sources had no per-unit functions, so their kernel bodies are
// copied here, unit by unit.
#ifdef BALLAST_PROBE_BASELINE
#include "cuda_hip/device/derivation_elements.hpp"
#else
#define BALLAST_ELEMENTS_ONLY 1
#include "cuda_hip/device/derivation_kernels.cuh"
#endif
#include <common/kernel_math.hpp>

#include <cstdint>

using namespace ballast;
using namespace ballast::gpu;
using std::uint16_t;
using std::uint32_t;
using std::uint64_t;
using std::uint8_t;

// Bytes written per unit, read by tools/kernel-report from these markers:
// PROBE_BYTES(name, bytes)
#define PROBE_BYTES(name, bytes)

#ifndef BALLAST_PROBE_BASELINE
// ---------------------------------------------------------------- current
#define TRANSPOSE_PROBE(T, name)                                                                        \
  extern "C" __global__ void name(const T* __restrict__ src, T* __restrict__ dst, uint64_t rows,        \
                                  uint64_t cols, uint64_t r0, uint64_t c0) {                            \
    __shared__ elem::Vec4 tile[elem::TransposeGeometry<sizeof(T)>::kPackets];                          \
    elem::transpose_fast_load(src, cols, r0, c0, threadIdx.x, tile);                                   \
    __syncthreads();                                                                                    \
    elem::transpose_fast_store(dst, rows, r0, c0, threadIdx.x, tile);                                  \
  }
// A thread writes a tile (128 * 128 / E bytes) / 64 threads.
PROBE_BYTES(probe_transpose_u8, 256)
TRANSPOSE_PROBE(uint8_t, probe_transpose_u8)
PROBE_BYTES(probe_transpose_u16, 128)
TRANSPOSE_PROBE(uint16_t, probe_transpose_u16)
PROBE_BYTES(probe_transpose_u32, 64)
TRANSPOSE_PROBE(uint32_t, probe_transpose_u32)
PROBE_BYTES(probe_transpose_u64, 32)
TRANSPOSE_PROBE(unsigned long long, probe_transpose_u64)

PROBE_BYTES(probe_to_f16_f32, 16)
extern "C" __global__ void probe_to_f16_f32(const elem::Vec4* __restrict__ in, elem::Vec4* __restrict__ out, uint64_t g) {
  g += threadIdx.x;
  out[g] = elem::to_f16_packet_f32(elem::load16(in + 2 * g), elem::load16(in + 2 * g + 1));
}
PROBE_BYTES(probe_to_f16_bf16, 16)
extern "C" __global__ void probe_to_f16_bf16(const elem::Vec4* __restrict__ in, elem::Vec4* __restrict__ out, uint64_t g) {
  g += threadIdx.x;
  out[g] = elem::to_f16_packet_bf16(elem::load16(in + g));
}

// The zero-point form is fixed to the bench case's (f32 scales: packed,
// f16: absent), as it is uniform in a launch: a static count over all
// three forms' code would overstate the instructions one thread executes.
#define INT4_PROBE(S, name, fn, ...)                                                                      \
  extern "C" __global__ void name(const uint8_t* __restrict__ b, const S* __restrict__ scales,            \
                                  const uint8_t* __restrict__ zps, elem::Int4Shape launch, uint64_t n,    \
                                  uint64_t chunk, __VA_ARGS__) {                                         \
    elem::Int4Shape shape = launch;                                                                       \
    chunk += threadIdx.x;                                                                                 \
    shape.zero_points = sizeof(S) == 4 ? ZeroPoints::packed_u4 : ZeroPoints::absent;          \
    fn;                                                                                                   \
  }
// dequant: a group of 8 columns of f16 (`chunk` is the group); repack: 4 words, plus a pair per block start (bs 32: one).
PROBE_BYTES(probe_dequant_int4_f32, 16)
INT4_PROBE(float, probe_dequant_int4_f32, elem::dequant_group_wide(shape, n, chunk, b, scales, zps, out), uint16_t* __restrict__ out)
PROBE_BYTES(probe_dequant_int4_f16, 16)
INT4_PROBE(uint16_t, probe_dequant_int4_f16, elem::dequant_group_wide(shape, n, chunk, b, scales, zps, out), uint16_t* __restrict__ out)
PROBE_BYTES(probe_repack_int4_f32, 20)
INT4_PROBE(float, probe_repack_int4_f32, elem::repack_chunk_wide(shape, n, chunk, b, scales, zps, words, pairs),
           uint32_t* __restrict__ words, uint32_t* __restrict__ pairs)
PROBE_BYTES(probe_repack_int4_f16, 20)
INT4_PROBE(uint16_t, probe_repack_int4_f16, elem::repack_chunk_wide(shape, n, chunk, b, scales, zps, words, pairs),
           uint32_t* __restrict__ words, uint32_t* __restrict__ pairs)

// quant_int8: one slab of 16 elements, both passes (the block reduction
// between them is per row, not per slab, and left out), codes by the row's
// reciprocal: the exact-division fallback (quotients within 2^-14 of a
// half-integer: about one slab in 500 for spread-out values) is left out.
#define QUANT_PROBE(S, name)                                                                                   \
  extern "C" __global__ void name(const S* __restrict__ row, uint64_t slab, float* __restrict__ max_out,      \
                                  elem::QuantScale scale, elem::Vec4* __restrict__ codes) {                   \
    const elem::QuantSlab<S> s = elem::quant_load_slab(row, slab + threadIdx.x);                              \
    *max_out = elem::quant_slab_max(s, 0.0f);                                                                 \
    bool exact = false;                                                                                       \
    codes[slab + threadIdx.x] = elem::quant_slab_codes_fast(s, scale.inv, exact);                             \
    *max_out += exact ? 1.0f : 0.0f;                                                                          \
  }
PROBE_BYTES(probe_quant_int8_f32, 16)
QUANT_PROBE(float, probe_quant_int8_f32)
PROBE_BYTES(probe_quant_int8_f16, 16)
QUANT_PROBE(uint16_t, probe_quant_int8_f16)

// dequant_gguf: one wide group of eight outputs of one row (16 bytes of
// f16, 32 of f32), decoded from its block; the shape is forced wide (dst
// aligned, cols % 8 == 0) and, for the plain float types, the source
// aligned (16-byte loads), as in the bench cases. Block types run the
// first half-block's branch: a warp runs one of the two (gguf_group_of_item).
#define GGUF_PROBE(T, OUT, name)                                                                                  \
  extern "C" __global__ void name(const uint8_t* __restrict__ src, OUT* __restrict__ dst, elem::GgufShape launch, \
                                  uint64_t n, uint64_t group) {                                                   \
    using G = elem::GgufGeometry<KernelType::T>;                                                                  \
    elem::GgufShape shape = launch;                                                                               \
    shape.wide = true;                                                                                            \
    shape.packets = true; /* aligned source */                                                                    \
    const uint64_t c0 = 8 * elem::gguf_group_of_item<KernelType::T>(shape, group + threadIdx.x);                  \
    elem::gguf_store_group<KernelType::T, OUT, G::kElements == 1 ? -1 : 0>(shape, src + n * shape.row_bytes, c0,  \
                                                                           dst + n * shape.cols + c0);            \
  }
PROBE_BYTES(probe_dequant_gguf_f32, 16)
GGUF_PROBE(float32, uint16_t, probe_dequant_gguf_f32)
PROBE_BYTES(probe_dequant_gguf_f16, 16)
GGUF_PROBE(float16, uint16_t, probe_dequant_gguf_f16)
PROBE_BYTES(probe_dequant_gguf_bf16, 16)
GGUF_PROBE(bfloat16, uint16_t, probe_dequant_gguf_bf16)
PROBE_BYTES(probe_dequant_gguf_q4_0, 16)
GGUF_PROBE(q4_0, uint16_t, probe_dequant_gguf_q4_0)
PROBE_BYTES(probe_dequant_gguf_q4_1, 16)
GGUF_PROBE(q4_1, uint16_t, probe_dequant_gguf_q4_1)
PROBE_BYTES(probe_dequant_gguf_q5_0, 16)
GGUF_PROBE(q5_0, uint16_t, probe_dequant_gguf_q5_0)
PROBE_BYTES(probe_dequant_gguf_q5_1, 16)
GGUF_PROBE(q5_1, uint16_t, probe_dequant_gguf_q5_1)
PROBE_BYTES(probe_dequant_gguf_q8_0, 16)
GGUF_PROBE(q8_0, uint16_t, probe_dequant_gguf_q8_0)
PROBE_BYTES(probe_dequant_gguf_q2_k, 16)
GGUF_PROBE(q2_k, uint16_t, probe_dequant_gguf_q2_k)
PROBE_BYTES(probe_dequant_gguf_q3_k, 16)
GGUF_PROBE(q3_k, uint16_t, probe_dequant_gguf_q3_k)
PROBE_BYTES(probe_dequant_gguf_q4_k, 16)
GGUF_PROBE(q4_k, uint16_t, probe_dequant_gguf_q4_k)
PROBE_BYTES(probe_dequant_gguf_q5_k, 16)
GGUF_PROBE(q5_k, uint16_t, probe_dequant_gguf_q5_k)
PROBE_BYTES(probe_dequant_gguf_q6_k, 16)
GGUF_PROBE(q6_k, uint16_t, probe_dequant_gguf_q6_k)
PROBE_BYTES(probe_dequant_gguf_q8_k, 16)
GGUF_PROBE(q8_k, uint16_t, probe_dequant_gguf_q8_k)
// f32 output: the same decoding, twice the bytes stored.
PROBE_BYTES(probe_dequant_gguf_f32_q4_0, 32)
GGUF_PROBE(q4_0, float, probe_dequant_gguf_f32_q4_0)
PROBE_BYTES(probe_dequant_gguf_f32_q4_k, 32)
GGUF_PROBE(q4_k, float, probe_dequant_gguf_f32_q4_k)
PROBE_BYTES(probe_dequant_gguf_f32_q6_k, 32)
GGUF_PROBE(q6_k, float, probe_dequant_gguf_f32_q6_k)

#else
// ---------------------------------------------------------------- baseline
// The old transpose kernel's body for one tile (TILE x TILE, 256 threads).
#define TRANSPOSE_PROBE(T, TILE, name)                                                                         \
  extern "C" __global__ void name(const T* __restrict__ src, T* __restrict__ dst, uint64_t rows, uint64_t cols, \
                                  uint64_t r0, uint64_t c0) {                                                    \
    constexpr unsigned kPad = sizeof(T) < 4 ? 4 / sizeof(T) : 1;                                                 \
    __shared__ T tile[TILE][TILE + kPad];                                                                        \
    _Pragma("unroll") for (unsigned yy = 0; yy < TILE; yy += 8) {                                                \
      _Pragma("unroll") for (unsigned xx = 0; xx < TILE; xx += 32) {                                             \
        const unsigned y = yy + threadIdx.y, x = xx + threadIdx.x;                                               \
        const uint64_t r = r0 + y, c = c0 + x;                                                                   \
        if (r < rows && c < cols) tile[y][x] = src[r * cols + c];                                                \
      }                                                                                                          \
    }                                                                                                            \
    __syncthreads();                                                                                             \
    _Pragma("unroll") for (unsigned yy = 0; yy < TILE; yy += 8) {                                                \
      _Pragma("unroll") for (unsigned xx = 0; xx < TILE; xx += 32) {                                             \
        const unsigned y = yy + threadIdx.y, x = xx + threadIdx.x;                                               \
        const uint64_t out_r = c0 + y, out_c = r0 + x;                                                           \
        if (out_r < cols && out_c < rows) dst[out_r * rows + out_c] = tile[x][y];                                \
      }                                                                                                          \
    }                                                                                                            \
  }
// A thread writes TILE * TILE * E / 256 bytes of a tile.
PROBE_BYTES(probe_transpose_u8, 64)
TRANSPOSE_PROBE(uint8_t, 128, probe_transpose_u8)
PROBE_BYTES(probe_transpose_u16, 32)
TRANSPOSE_PROBE(uint16_t, 64, probe_transpose_u16)
PROBE_BYTES(probe_transpose_u32, 16)
TRANSPOSE_PROBE(uint32_t, 32, probe_transpose_u32)
PROBE_BYTES(probe_transpose_u64, 32)
TRANSPOSE_PROBE(unsigned long long, 32, probe_transpose_u64)

PROBE_BYTES(probe_to_f16_f32, 16)
extern "C" __global__ void probe_to_f16_f32(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t g) {
  const uint4 lo = src[2 * g], hi = src[2 * g + 1];
  const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  uint32_t out[4];
  _Pragma("unroll") for (unsigned i = 0; i < 4; ++i) out[i] =
      kmath::f16_bits_from_f32(kmath::f32_from_bits(words[2 * i])) |
      (static_cast<uint32_t>(kmath::f16_bits_from_f32(kmath::f32_from_bits(words[2 * i + 1]))) << 16);
  dst[g] = make_uint4(out[0], out[1], out[2], out[3]);
}
PROBE_BYTES(probe_to_f16_bf16, 16)
extern "C" __global__ void probe_to_f16_bf16(const uint4* __restrict__ src, uint4* __restrict__ dst, uint64_t g) {
  const uint4 in = src[g];
  const uint32_t words[4] = {in.x, in.y, in.z, in.w};
  uint32_t out[4];
  _Pragma("unroll") for (unsigned i = 0; i < 4; ++i) out[i] =
      kmath::f16_bits_from_bf16_bits(static_cast<uint16_t>(words[i] & 0xffffu)) |
      (static_cast<uint32_t>(kmath::f16_bits_from_bf16_bits(static_cast<uint16_t>(words[i] >> 16))) << 16);
  dst[g] = make_uint4(out[0], out[1], out[2], out[3]);
}

// The old dequant kernel's body for one group (8 columns, 16 bytes).
#define DEQUANT_PROBE(TYPE, name)                                                                              \
  extern "C" __global__ void name(KernelArgs a, uint64_t g) {                                                  \
    a.zero_points = TYPE == KernelType::float32 ? ZeroPoints::packed_u4 : ZeroPoints::absent;      \
    const uint8_t* b = reinterpret_cast<const uint8_t*>(a.src);                                                \
    uint16_t* out = reinterpret_cast<uint16_t*>(a.dst);                                                        \
    const uint64_t kb = elem::int4_k_blocks(a.cols, a.block_size);                                             \
    const uint64_t row_bytes = elem::int4_row_bytes(kb, a.block_size);                                         \
    const uint64_t groups_per_row = (a.cols + 7) / 8;                                                          \
    const uint64_t n = static_cast<uint32_t>(g) / static_cast<uint32_t>(groups_per_row);                       \
    const uint64_t j = static_cast<uint32_t>(g) - static_cast<uint32_t>(n) * static_cast<uint32_t>(groups_per_row); \
    const uint64_t k0 = 8 * j;                                                                                 \
    const uint64_t block = k0 / a.block_size;                                                                  \
    const float scale = elem::int4_scale(reinterpret_cast<const void*>(a.scales), TYPE, n * kb + block);      \
    const float zp = elem::int4_zero_point(a.zero_points, reinterpret_cast<const void*>(a.zero_point), TYPE, kb, n, block); \
    const uint32_t codes = *reinterpret_cast<const uint32_t*>(b + n * row_bytes + 4 * j);                      \
    uint16_t h[8];                                                                                             \
    elem::dequant_group(codes, zp, scale, h);                                                                  \
    *reinterpret_cast<uint4*>(out + n * a.cols + k0) = make_uint4(h[0] | (uint32_t(h[1]) << 16), h[2] | (uint32_t(h[3]) << 16), \
                                                                  h[4] | (uint32_t(h[5]) << 16), h[6] | (uint32_t(h[7]) << 16)); \
  }
PROBE_BYTES(probe_dequant_int4_f32, 16)
DEQUANT_PROBE(KernelType::float32, probe_dequant_int4_f32)
PROBE_BYTES(probe_dequant_int4_f16, 16)
DEQUANT_PROBE(KernelType::float16, probe_dequant_int4_f16)

// The old repack: one word (4 bytes) per thread in the words kernel, and
// one thread of the pairs kernel per block (bs 32: one per four words):
// the probe does four word threads and one pair thread, 20 bytes.
#define REPACK_PROBE(TYPE, name)                                                                                  \
  extern "C" __global__ void name(KernelArgs a, uint64_t g) {                                                     \
    a.zero_points = TYPE == KernelType::float32 ? ZeroPoints::packed_u4 : ZeroPoints::absent;         \
    const uint8_t* b = reinterpret_cast<const uint8_t*>(a.src);                                                   \
    const uint64_t kb = elem::int4_k_blocks(a.cols, a.block_size);                                                \
    const uint64_t row_bytes = elem::int4_row_bytes(kb, a.block_size);                                            \
    const uint64_t groups_per_row = (a.cols + 7) / 8;                                                             \
    _Pragma("unroll") for (unsigned u = 0; u < 4; ++u) {                                                         \
    const uint64_t gw = 4 * g + u;                                                                                \
    const uint64_t n = static_cast<uint32_t>(gw) / static_cast<uint32_t>(groups_per_row);                         \
    const uint64_t j = static_cast<uint32_t>(gw) - static_cast<uint32_t>(n) * static_cast<uint32_t>(groups_per_row); \
    const uint64_t k0 = 8 * j;                                                                                    \
    const uint64_t block = k0 / a.block_size;                                                                     \
    const uint32_t codes = *reinterpret_cast<const uint32_t*>(b + n * row_bytes + 4 * j);                         \
    const float zp = elem::int4_zero_point(a.zero_points, reinterpret_cast<const void*>(a.zero_point), TYPE, kb, n, block); \
    reinterpret_cast<uint32_t*>(a.dst)[gw] = elem::repack_group(codes, a.cols - k0, zp);                         \
    }                                                                                                             \
    const uint64_t pn = static_cast<uint32_t>(g) / static_cast<uint32_t>(kb);                                     \
    const uint64_t pb = static_cast<uint32_t>(g) - static_cast<uint32_t>(pn) * static_cast<uint32_t>(kb);         \
    const float s2 = elem::int4_scale(reinterpret_cast<const void*>(a.scales), TYPE, g);                          \
    const float z2 = elem::int4_zero_point(a.zero_points, reinterpret_cast<const void*>(a.zero_point), TYPE, kb, pn, pb); \
    reinterpret_cast<uint32_t*>(a.dst2)[g] = kmath::repack_scale_pair(s2, z2);                                    \
  }
PROBE_BYTES(probe_repack_int4_f32, 20)
REPACK_PROBE(KernelType::float32, probe_repack_int4_f32)
PROBE_BYTES(probe_repack_int4_f16, 20)
REPACK_PROBE(KernelType::float16, probe_repack_int4_f16)

// The old quant_int8: four elements per quad in each pass, 4 bytes written.
#define QUANT_PROBE(SRC, name)                                                                                 \
  extern "C" __global__ void name(const void* __restrict__ row, uint64_t k, float* __restrict__ max_out,      \
                                  float scale, int8_t* __restrict__ code_row) {                               \
    float w[4];                                                                                                \
    if (SRC == KernelType::float16) {                                                                          \
      const uint2 v = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(row) + k);                  \
      w[0] = kmath::f32_from_f16_bits(v.x & 0xffff);                                                           \
      w[1] = kmath::f32_from_f16_bits(v.x >> 16);                                                              \
      w[2] = kmath::f32_from_f16_bits(v.y & 0xffff);                                                           \
      w[3] = kmath::f32_from_f16_bits(v.y >> 16);                                                              \
    } else {                                                                                                   \
      const float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(row) + k);                   \
      w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;                                                          \
    }                                                                                                          \
    float m = 0.0f;                                                                                            \
    _Pragma("unroll") for (unsigned i = 0; i < 4; ++i) m = kmath::abs_max_step(m, w[i]);                       \
    *max_out = m;                                                                                              \
    uint32_t packed = 0;                                                                                       \
    _Pragma("unroll") for (unsigned i = 0; i < 4; ++i) {                                                       \
      const float x = elem::quant_source(row, SRC, k + i);                                                     \
      packed |= static_cast<uint32_t>(static_cast<uint8_t>(kmath::quant_int8_code(x, scale))) << (8 * i);     \
    }                                                                                                          \
    *reinterpret_cast<uint32_t*>(code_row + k) = packed;                                                       \
  }
PROBE_BYTES(probe_quant_int8_f32, 4)
QUANT_PROBE(KernelType::float32, probe_quant_int8_f32)
PROBE_BYTES(probe_quant_int8_f16, 4)
QUANT_PROBE(KernelType::float16, probe_quant_int8_f16)
#endif
