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
  bool stream = false;  // outputs of kStreamBytes or more: non-temporal stores where aligned
};

struct Quant8Args {
  const void* src = nullptr;  // [N, K] f32 or f16
  bool f16_src = false;
  std::uint64_t n = 0, k = 0;
  std::int8_t* codes = nullptr;  // [N, K]
  float* scales = nullptr;       // [N]
  // quant_int8_given_max: each row's maximum, given (kmath::given_row_max
  // of it); nullptr: taken from the row.
  const float* given_max = nullptr;
  bool stream = false;           // codes of kStreamBytes or more: non-temporal stores where aligned
};

// An output this large streams past the cache
// (non-temporal stores), as the C library's memcpy does for copies of this
// size: nothing reads a derived weight back soon, and writing it through the
// cache would both evict the engine's working set and cost a read of every
// line it writes (the read-for-ownership that held dequantization to about
// half the copy's bandwidth). Smaller outputs stay in the cache for whatever
// reads them next.
constexpr std::uint64_t kStreamBytes = 8ull << 20;

struct RowKernels {
  const char* name;
  // Source columns [col_begin, col_end) of a [rows, cols] matrix of
  // `element_bytes`-wide elements (1, 2, 4 or 8) to the destination rows of
  // the same numbers in the [cols, rows] transpose.
  void (*transpose_cols)(const void* src, void* dst, std::uint64_t rows, std::uint64_t cols, unsigned element_bytes,
                         std::uint64_t col_begin, std::uint64_t col_end);
  // `stream`: the piece of an output of kStreamBytes or more.
  void (*to_f16_from_f32)(const float* src, std::uint16_t* dst, std::uint64_t count, bool stream);
  void (*to_f16_from_bf16)(const std::uint16_t* src, std::uint16_t* dst, std::uint64_t count, bool stream);
  void (*dequant_int4_rows)(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end);
  void (*repack_int4_rows)(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end);
  void (*quant_int8_rows)(const Quant8Args& a, std::uint64_t row_begin, std::uint64_t row_end);
  // A piece of a copy (copy_device, uploads, downloads); `stream`: the piece
  // of a copy of kStreamBytes or more, whose stores go past the cache as the
  // derivations' do, so the copy the benchmarks hold them against writes
  // the same way (the C library's memcpy decides from the cache size it
  // reads, which on some machines never streams a piece of this size).
  void (*copy)(void* dst, const void* src, std::uint64_t bytes, bool stream);
};

const RowKernels& portable_kernels();
// The vectorised table when this CPU supports it, else nullptr.
const RowKernels* simd_kernels();
// The table that adds AVX-512 (F, BW, VL, DQ) forms where they exist (the
// byte transpose, dequant_int4 at block sizes that are multiples of 32,
// quant_int8 and the GGUF decoders to f16; the others are
// simd_kernels()'s), else nullptr.
const RowKernels* simd512_kernels();

// Runs a launch whose pointers have been validated; blocks until done.
void run_derivation(const DerivationLaunch& launch, const RowKernels& kernels, ThreadPool& pool);

// ---- One function per kind, `run_<kind>`: splits a launch of that kind
// over the pool. Each is defined beside its kernel (kernels.cpp: the float
// and int4 kinds; kernels_gguf.cpp: GGUF's), and run_derivation's table is
// built from the same list (BALLAST_DERIVATION_KINDS), so a new kind is
// its one function here and nothing in this header or kernels.cpp; a kind
// without it fails to link.
#define BALLAST_CPU_DECLARE_RUN(name) \
  void run_##name(const DerivationLaunch& launch, const RowKernels& kernels, ThreadPool& pool);
BALLAST_DERIVATION_KINDS(BALLAST_CPU_DECLARE_RUN)
#undef BALLAST_CPU_DECLARE_RUN

// What the run_ functions share: a launch's device address as a host
// pointer (the CPU's device memory is host memory), and how many chunks to
// split `rows` into on `pool`.
template <class T>
T* as(DevicePtr p) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(p));
}
std::uint64_t chunks_for(ThreadPool& pool, std::uint64_t rows);

}  // namespace ballast::cpu
