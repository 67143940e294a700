// The CPU derivation kernels. `run_derivation` splits a launch over the
// pool; the per-row work comes from a RowKernels table: the portable one
// (plain C++ over kernel_math.hpp, auto-vectorised) or, where the CPU has
// them, hand-vectorised versions (x86-64 AVX2 + F16C). Both produce the
// same bits; the unit tests hold them to the scalar reference.
#pragma once

#include <ballast/derivation.hpp>

#include <cstdint>

namespace ballast::cpu {

class ThreadPool;

struct Int4Args {
  const std::uint8_t* b = nullptr;  // [N, k_blocks, block_size/2]
  const void* scales = nullptr;     // [N, k_blocks] f32 or f16
  const void* zero_points = nullptr;
  ZeroPoints zero_point_form = ZeroPoints::absent;
  bool f16_scales = false;
  std::uint64_t n = 0, k = 0, block_size = 0, k_blocks = 0;
  std::uint16_t* f16_out = nullptr;  // dequant_int4: [N, K]
  std::uint32_t* words = nullptr;    // repack_int4: [N, ceil(K/8)]
  // repack_int4: [N, k_blocks] (scale, -scale*zp), each pair a 4-byte
  // little-endian word of two f16. dst2's elements are the f16 halves, so
  // it is only 2-byte aligned: written with store_pair, never as uint32_t.
  std::uint8_t* pairs = nullptr;
};

struct Quant8Args {
  const void* src = nullptr;  // [N, K] f32 or f16
  bool f16_src = false;
  std::uint64_t n = 0, k = 0;
  std::int8_t* codes = nullptr;  // [N, K]
  float* scales = nullptr;       // [N]
};

struct GgufArgs {
  std::uint32_t type = 0;                // a kinds::kGgufBlocks type, as DataType numbers it
  std::uint32_t block_elements = 0, block_bytes = 0;
  const std::uint8_t* src = nullptr;     // [rows, cols / block_elements, block_bytes]
  std::uint64_t rows = 0, cols = 0;
  std::uint16_t* f16_out = nullptr;      // dequant_gguf: [rows, cols]
  float* f32_out = nullptr;              // dequant_gguf_f32: [rows, cols]
  // The table's f32 -> f16 rounding (F16C where the CPU has it).
  void (*to_f16)(const float* src, std::uint16_t* dst, std::uint64_t count) = nullptr;
  // The decoders built for AVX2 + F16C (x86-64 with the vectorised table).
  bool avx2 = false;
  // The AVX2 decoders write with non-temporal stores: set for outputs of at
  // least kStreamBytes whose address is 32-byte aligned (kernels.cpp).
  bool stream = false;
  // repack_gguf_int4: [rows, cols / 8] words and [rows, blocks] pairs (each
  // a 4-byte little-endian word of two f16; only 2-byte aligned, as
  // repack_int4's: written with memcpy).
  std::uint32_t* words = nullptr;
  std::uint8_t* pairs = nullptr;
};

// A dequant_gguf(_f32) output this large streams past the cache
// (non-temporal stores), as the C library's memcpy does for copies of this
// size: nothing reads a derived weight back soon, and writing it through the
// cache would both evict the engine's working set and cost a read of every
// line it writes (the read-for-ownership that held dequantization to about
// half the copy's bandwidth). Smaller outputs stay in the cache for whatever
// reads them next.
constexpr std::uint64_t kStreamBytes = 8ull << 20;

// Rows of a repack_gguf_int4 launch (Q4_0 / Q4_1 into repack_int4's layout).
void repack_gguf_int4_rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end);

// Rows [row_begin, row_end) of a dequant_gguf(_f32) launch (kernels_gguf.cpp;
// one decoder for every CPU, its loops vectorised by the compiler; the f16
// rounding is the RowKernels table's).
void dequant_gguf_rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end);

struct RowKernels {
  const char* name;
  // Source columns [col_begin, col_end) of a [rows, cols] matrix of
  // `element_bytes`-wide elements (1, 2, 4 or 8) to the destination rows of
  // the same numbers in the [cols, rows] transpose.
  void (*transpose_cols)(const void* src, void* dst, std::uint64_t rows, std::uint64_t cols, unsigned element_bytes,
                         std::uint64_t col_begin, std::uint64_t col_end);
  void (*to_f16_from_f32)(const float* src, std::uint16_t* dst, std::uint64_t count);
  void (*to_f16_from_bf16)(const std::uint16_t* src, std::uint16_t* dst, std::uint64_t count);
  void (*dequant_int4_rows)(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end);
  void (*repack_int4_rows)(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end);
  void (*quant_int8_rows)(const Quant8Args& a, std::uint64_t row_begin, std::uint64_t row_end);
};

const RowKernels& portable_kernels();
// The vectorised table when this CPU supports it, else nullptr.
const RowKernels* simd_kernels();

// Runs a launch whose pointers have been validated; blocks until done.
void run_derivation(const DerivationLaunch& launch, const RowKernels& kernels, ThreadPool& pool);

}  // namespace ballast::cpu
