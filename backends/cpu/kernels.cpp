// The float and int4 kinds' run_ functions (splitting a launch over the
// pool), and run_derivation's table of every kind's.
#include "kernels.hpp"

#include "thread_pool.hpp"

#include <algorithm>
#include <cstring>

namespace ballast::cpu {

// A few chunks per thread keep every core busy when one is slowed by other
// load, without many hand-offs.
std::uint64_t chunks_for(ThreadPool& pool, std::uint64_t rows) {
  return std::min<std::uint64_t>(rows, pool.threads() * 4ull);
}

void run_transpose(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
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

void run_to_f16(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  auto* dst = as<std::uint16_t>(l.dst);
  const std::uint64_t count = l.rows * l.cols;
  // Split on 64-element boundaries so vector loops rarely need tails.
  const std::uint64_t groups = (count + 63) / 64;
  const bool stream = count * 2 >= kStreamBytes;
  pool.parallel_for(groups, [&](std::uint64_t g0, std::uint64_t g1) {
    const std::uint64_t i0 = g0 * 64, i1 = std::min(count, g1 * 64);
    if (l.src_type == DataType::float32) kernels.to_f16_from_f32(as<const float>(l.src) + i0, dst + i0, i1 - i0, stream);
    else kernels.to_f16_from_bf16(as<const std::uint16_t>(l.src) + i0, dst + i0, i1 - i0, stream);
  }, chunks_for(pool, groups));
}

namespace {

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
  // Output bytes: f16 [N, K], or words [N, K/8] (the pairs are a sixteenth of them).
  a.stream = (l.kind == Derivation::dequant_int4 ? a.n * a.k * 2 : a.n * a.k / 2) >= kStreamBytes;
  pool.parallel_for(a.n, [&](std::uint64_t r0, std::uint64_t r1) { rows(a, r0, r1); }, chunks_for(pool, a.n));
}

}  // namespace

void run_dequant_int4(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) { int4(l, kernels, pool); }
void run_repack_int4(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) { int4(l, kernels, pool); }

void run_quant_int8(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  Quant8Args a;
  a.src = as<const void>(l.src);
  a.f16_src = l.src_type == DataType::float16;
  a.n = l.rows;
  a.k = l.cols;
  a.codes = as<std::int8_t>(l.dst);
  a.scales = as<float>(l.dst2);
  a.stream = a.n * a.k >= kStreamBytes;
  if (l.kind == Derivation::quant_int8_given_max) a.given_max = as<const float>(l.scales);
  pool.parallel_for(a.n, [&](std::uint64_t r0, std::uint64_t r1) { kernels.quant_int8_rows(a, r0, r1); },
                    chunks_for(pool, a.n));
}

// The same row kernels, each row's maximum read from the scales operand.
void run_quant_int8_given_max(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  run_quant_int8(l, kernels, pool);
}

// A strided shard gathered: each output row is one run of the source row,
// so a row is one memcpy (the C library's, which streams a long one).
void run_slice(const DerivationLaunch& l, const RowKernels&, ThreadPool& pool) {
  const std::uint64_t element_bytes = dtype_bits(l.src_type) / 8;
  const auto* src = as<const std::byte>(l.src);
  auto* dst = as<std::byte>(l.dst);
  const std::uint64_t run = l.cols * element_bytes, stride = l.src_cols * element_bytes,
                      first = l.col_offset * element_bytes;
  pool.parallel_for(l.rows, [&](std::uint64_t r0, std::uint64_t r1) {
    for (std::uint64_t r = r0; r < r1; ++r) std::memcpy(dst + r * run, src + r * stride + first, run);
  }, chunks_for(pool, l.rows));
}

namespace {

// One row per derivation kind, in the kind table's order, from the list
// the run_ functions are declared by (kernels.hpp).
struct KernelRow {
  Derivation kind;
  void (*run)(const DerivationLaunch&, const RowKernels&, ThreadPool&);
};
#define BALLAST_CPU_KERNEL_ROW(name) KernelRow{Derivation::name, run_##name},
constexpr KernelRow kKernels[] = {BALLAST_DERIVATION_KINDS(BALLAST_CPU_KERNEL_ROW)};
#undef BALLAST_CPU_KERNEL_ROW
static_assert(kinds::covers_every_kind(kKernels), "the CPU backend needs one kernel row per derivation kind");

}  // namespace

void run_derivation(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  kKernels[static_cast<int>(l.kind)].run(l, kernels, pool);
}

}  // namespace ballast::cpu
