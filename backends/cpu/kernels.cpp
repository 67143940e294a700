// Splitting a launch over the pool, and the transpose (plain blocked loops;
// the element moves are all the work there is).
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

// Tiles small enough that a tile's source rows and destination rows both
// stay in L1 while it is moved.
template <class T>
void transpose_tiles(const T* src, T* dst, std::uint64_t rows, std::uint64_t cols, std::uint64_t col_begin,
                     std::uint64_t col_end) {
  constexpr std::uint64_t kTile = 128 / sizeof(T) < 16 ? 16 : 128 / sizeof(T);
  for (std::uint64_t r0 = 0; r0 < rows; r0 += kTile) {
    const std::uint64_t r1 = std::min(rows, r0 + kTile);
    for (std::uint64_t c0 = col_begin; c0 < col_end; c0 += kTile) {
      const std::uint64_t c1 = std::min(col_end, c0 + kTile);
      for (std::uint64_t c = c0; c < c1; ++c) {
        T* out = dst + c * rows;
        for (std::uint64_t r = r0; r < r1; ++r) out[r] = src[r * cols + c];
      }
    }
  }
}

template <class T>
void transpose(const DerivationLaunch& l, ThreadPool& pool) {
  const T* src = as<const T>(l.src);
  T* dst = as<T>(l.dst);
  if (l.rows == 1 || l.cols == 1) {  // a vector: the bytes do not move
    std::memcpy(dst, src, l.rows * l.cols * sizeof(T));
    return;
  }
  // Split the source columns (destination rows) so each thread writes a
  // contiguous stretch of the destination.
  pool.parallel_for(l.cols, [&](std::uint64_t c0, std::uint64_t c1) { transpose_tiles(src, dst, l.rows, l.cols, c0, c1); });
}

// A few chunks per thread keep every core busy when one is slowed by other
// load, without many hand-offs.
std::uint64_t chunks_for(ThreadPool& pool, std::uint64_t rows) {
  return std::min<std::uint64_t>(rows, pool.threads() * 4ull);
}

}  // namespace

void run_derivation(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  switch (l.kind) {
    case Derivation::transpose:
      switch (dtype_bits(l.src_type)) {
        case 8: transpose<std::uint8_t>(l, pool); break;
        case 16: transpose<std::uint16_t>(l, pool); break;
        case 32: transpose<std::uint32_t>(l, pool); break;
        case 64: transpose<std::uint64_t>(l, pool); break;
      }
      return;
    case Derivation::to_f16: {
      auto* dst = as<std::uint16_t>(l.dst);
      const std::uint64_t count = l.rows * l.cols;
      // Split on 64-element boundaries so vector loops rarely need tails.
      const std::uint64_t groups = (count + 63) / 64;
      pool.parallel_for(groups, [&](std::uint64_t g0, std::uint64_t g1) {
        const std::uint64_t i0 = g0 * 64, i1 = std::min(count, g1 * 64);
        if (l.src_type == DataType::float32) kernels.to_f16_from_f32(as<const float>(l.src) + i0, dst + i0, i1 - i0);
        else kernels.to_f16_from_bf16(as<const std::uint16_t>(l.src) + i0, dst + i0, i1 - i0);
      });
      return;
    }
    case Derivation::dequant_int4:
    case Derivation::repack_int4: {
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
        a.pairs = as<std::uint32_t>(l.dst2);
      }
      pool.parallel_for(a.n, [&](std::uint64_t r0, std::uint64_t r1) { rows(a, r0, r1); }, chunks_for(pool, a.n));
      return;
    }
    case Derivation::quant_int8: {
      Quant8Args a;
      a.src = as<const void>(l.src);
      a.f16_src = l.src_type == DataType::float16;
      a.n = l.rows;
      a.k = l.cols;
      a.codes = as<std::int8_t>(l.dst);
      a.scales = as<float>(l.dst2);
      pool.parallel_for(a.n, [&](std::uint64_t r0, std::uint64_t r1) { kernels.quant_int8_rows(a, r0, r1); },
                        chunks_for(pool, a.n));
      return;
    }
  }
}

}  // namespace ballast::cpu
