// Splitting a launch over the pool.
#include "kernels.hpp"

#include "thread_pool.hpp"

#include <algorithm>
#include <cstring>

namespace ballast::cpu {

namespace {

template <class T>
T* as(DevicePtr p) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(p));
}

// A few chunks per thread keep every core busy when one is slowed by other
// load, without many hand-offs.
std::uint64_t chunks_for(ThreadPool& pool, std::uint64_t rows) {
  return std::min<std::uint64_t>(rows, pool.threads() * 4ull);
}

void transpose(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  const unsigned element_bytes = dtype_bits(l.src_type) / 8;
  const void* src = as<const void>(l.src);
  void* dst = as<void>(l.dst);
  if (l.rows == 1 || l.cols == 1) {  // a vector: the bytes do not move
    std::memcpy(dst, src, l.rows * l.cols * element_bytes);
    return;
  }
  // Split the source columns (destination rows) so each thread writes a
  // contiguous stretch of the destination; 64-column steps keep every
  // chunk on whole tiles.
  const std::uint64_t steps = (l.cols + 63) / 64;
  pool.parallel_for(steps, [&](std::uint64_t s0, std::uint64_t s1) {
    kernels.transpose_cols(src, dst, l.rows, l.cols, element_bytes, s0 * 64, std::min(l.cols, s1 * 64));
  }, chunks_for(pool, steps));
}

void to_f16(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  auto* dst = as<std::uint16_t>(l.dst);
  const std::uint64_t count = l.rows * l.cols;
  // Split on 64-element boundaries so vector loops rarely need tails.
  const std::uint64_t groups = (count + 63) / 64;
  pool.parallel_for(groups, [&](std::uint64_t g0, std::uint64_t g1) {
    const std::uint64_t i0 = g0 * 64, i1 = std::min(count, g1 * 64);
    if (l.src_type == DataType::float32) kernels.to_f16_from_f32(as<const float>(l.src) + i0, dst + i0, i1 - i0);
    else kernels.to_f16_from_bf16(as<const std::uint16_t>(l.src) + i0, dst + i0, i1 - i0);
  }, chunks_for(pool, groups));
}

void int4(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {  // dequant_int4 and repack_int4
  Int4Args a;
  a.b = as<const std::uint8_t>(l.src);
  a.scales = as<const void>(l.scales);
  a.zero_points = as<const void>(l.zero_point);
  a.zero_point_form = l.zero_points;
  a.f16_scales = l.src_type == DataType::float16;
  a.n = l.rows;
  a.k = l.cols;
  a.block_size = l.block_size;
  a.k_blocks = k_blocks(l.cols, l.block_size);
  auto rows = l.kind == Derivation::dequant_int4 ? kernels.dequant_int4_rows : kernels.repack_int4_rows;
  if (l.kind == Derivation::dequant_int4) {
    a.f16_out = as<std::uint16_t>(l.dst);
  } else {
    a.words = as<std::uint32_t>(l.dst);
    a.pairs = as<std::uint8_t>(l.dst2);
  }
  pool.parallel_for(a.n, [&](std::uint64_t r0, std::uint64_t r1) { rows(a, r0, r1); }, chunks_for(pool, a.n));
}

void quant_int8(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  Quant8Args a;
  a.src = as<const void>(l.src);
  a.f16_src = l.src_type == DataType::float16;
  a.n = l.rows;
  a.k = l.cols;
  a.codes = as<std::int8_t>(l.dst);
  a.scales = as<float>(l.dst2);
  pool.parallel_for(a.n, [&](std::uint64_t r0, std::uint64_t r1) { kernels.quant_int8_rows(a, r0, r1); },
                    chunks_for(pool, a.n));
}

// The source side of a GGUF launch, its block geometry from the kind table's
// block rows (derivation_layout checked src_type is one).
GgufArgs gguf_args(const DerivationLaunch& l) {
  const kinds::GgufBlock& block = *kinds::gguf_block(l.src_type);
  GgufArgs a;
  a.type = static_cast<std::uint32_t>(l.src_type);
  a.block_elements = block.elements;
  a.block_bytes = block.bytes;
  a.src = as<const std::uint8_t>(l.src);
  a.rows = l.rows;
  a.cols = l.cols;
  return a;
}

void dequant_gguf(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  GgufArgs a = gguf_args(l);
  a.to_f16 = kernels.to_f16_from_f32;
  a.avx2 = &kernels == simd_kernels();  // that table exists only where the CPU has AVX2 and F16C
  const bool f16 = l.kind == Derivation::dequant_gguf;
  if (f16) a.f16_out = as<std::uint16_t>(l.dst);
  else a.f32_out = as<float>(l.dst);
  // Every block's output starts 64 bytes after the last (32 elements at
  // least), so an aligned base keeps every streamed store aligned.
  a.stream = a.rows * a.cols * (f16 ? 2 : 4) >= kStreamBytes && l.dst % 32 == 0;
  pool.parallel_for(a.rows, [&](std::uint64_t r0, std::uint64_t r1) { dequant_gguf_rows(a, r0, r1); },
                    chunks_for(pool, a.rows));
}

void repack_gguf(const DerivationLaunch& l, const RowKernels&, ThreadPool& pool) {
  GgufArgs a = gguf_args(l);
  a.words = as<std::uint32_t>(l.dst);
  a.pairs = as<std::uint8_t>(l.dst2);
  pool.parallel_for(a.rows, [&](std::uint64_t r0, std::uint64_t r1) { repack_gguf_int4_rows(a, r0, r1); },
                    chunks_for(pool, a.rows));
}

// One row per derivation kind, in the kind table's order.
struct KernelRow {
  Derivation kind;
  void (*run)(const DerivationLaunch&, const RowKernels&, ThreadPool&);
};
constexpr KernelRow kKernels[] = {{Derivation::transpose, transpose},
                                  {Derivation::to_f16, to_f16},
                                  {Derivation::dequant_int4, int4},
                                  {Derivation::repack_int4, int4},
                                  {Derivation::quant_int8, quant_int8},
                                  {Derivation::dequant_gguf, dequant_gguf},
                                  {Derivation::dequant_gguf_f32, dequant_gguf},
                                  {Derivation::repack_gguf_int4, repack_gguf}};
static_assert(kinds::covers_every_kind(kKernels), "the CPU backend needs one kernel row per derivation kind");

}  // namespace

void run_derivation(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  kKernels[static_cast<int>(l.kind)].run(l, kernels, pool);
}

}  // namespace ballast::cpu
