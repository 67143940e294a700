// Plain C++ row kernels over kernel_math.hpp: the reference for the
// vectorised table and the fallback on CPUs without it.
#include "int4_access.hpp"
#include "kernels.hpp"

#include <common/kernel_math.hpp>

#include <cstring>

namespace ballast::cpu {

namespace {

// Tiles small enough that a tile's source and destination lines stay in
// cache while it is moved.
template <class T>
void transpose_tiles(const T* src, T* dst, std::uint64_t rows, std::uint64_t cols, std::uint64_t col_begin,
                     std::uint64_t col_end) {
  constexpr std::uint64_t kTile = 32;
  for (std::uint64_t r0 = 0; r0 < rows; r0 += kTile) {
    const std::uint64_t r1 = r0 + kTile < rows ? r0 + kTile : rows;
    for (std::uint64_t c0 = col_begin; c0 < col_end; c0 += kTile) {
      const std::uint64_t c1 = c0 + kTile < col_end ? c0 + kTile : col_end;
      for (std::uint64_t c = c0; c < c1; ++c) {
        T* out = dst + c * rows;
        for (std::uint64_t r = r0; r < r1; ++r) out[r] = src[r * cols + c];
      }
    }
  }
}

void transpose_cols(const void* src, void* dst, std::uint64_t rows, std::uint64_t cols, unsigned element_bytes,
                    std::uint64_t col_begin, std::uint64_t col_end) {
  switch (element_bytes) {
    case 1: return transpose_tiles(static_cast<const std::uint8_t*>(src), static_cast<std::uint8_t*>(dst), rows, cols, col_begin, col_end);
    case 2: return transpose_tiles(static_cast<const std::uint16_t*>(src), static_cast<std::uint16_t*>(dst), rows, cols, col_begin, col_end);
    case 4: return transpose_tiles(static_cast<const std::uint32_t*>(src), static_cast<std::uint32_t*>(dst), rows, cols, col_begin, col_end);
    case 8: return transpose_tiles(static_cast<const std::uint64_t*>(src), static_cast<std::uint64_t*>(dst), rows, cols, col_begin, col_end);
  }
}

// The portable kernels store plainly: `stream` is a hint they do not take.
void copy(void* dst, const void* src, std::uint64_t bytes, bool /*stream*/) { std::memcpy(dst, src, bytes); }

void to_f16_from_f32(const float* src, std::uint16_t* dst, std::uint64_t count, bool /*stream*/) {
  for (std::uint64_t i = 0; i < count; ++i) dst[i] = kmath::f16_bits_from_f32(src[i]);
}

void to_f16_from_bf16(const std::uint16_t* src, std::uint16_t* dst, std::uint64_t count, bool /*stream*/) {
  for (std::uint64_t i = 0; i < count; ++i) dst[i] = kmath::f16_bits_from_bf16_bits(src[i]);
}

void dequant_int4_rows(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* row = a.b + n * int4_row_bytes(a);
    std::uint16_t* out = a.f16_out + n * a.k;
    for (std::uint64_t block = 0; block < a.k_blocks; ++block) {
      // Every value of a block is one of 16: compute them once.
      const float scale = int4_scale(a, n, block), zp = int4_zero_point(a, n, block);
      std::uint16_t table[16];
      for (std::uint32_t q = 0; q < 16; ++q) table[q] = kmath::dequant_f16_bits(q, zp, scale);
      const std::uint64_t first = block * a.block_size;
      const std::uint64_t last = first + a.block_size < a.k ? first + a.block_size : a.k;
      for (std::uint64_t col = first; col < last; ++col) out[col] = table[kmath::int4_code(row, col)];
    }
  }
}

void repack_int4_rows(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  const std::uint64_t words = (a.k + 7) / 8, full_words = a.k / 8;
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* row = a.b + n * int4_row_bytes(a);
    std::uint32_t* out = a.words + n * words;
    for (std::uint64_t j = 0; j < full_words; ++j) {
      std::uint32_t v;
      std::memcpy(&v, row + 4 * j, 4);
      out[j] = int4_repack_bytes(v);
    }
    if (full_words < words) out[full_words] = int4_partial_word(a, n, full_words);
    std::uint8_t* pairs = a.pairs + 4 * n * a.k_blocks;
    for (std::uint64_t block = 0; block < a.k_blocks; ++block)
      store_pair(pairs, block, kmath::repack_scale_pair(int4_scale(a, n, block), int4_zero_point(a, n, block)));
  }
}

template <bool F16>
float quant_source(const void* src, std::uint64_t i) {
  if constexpr (F16) return kmath::f32_from_f16_bits(static_cast<const std::uint16_t*>(src)[i]);
  else return static_cast<const float*>(src)[i];
}

template <bool F16>
void quant_int8_rows_typed(const Quant8Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint64_t base = n * a.k;
    float max_abs = 0.0f;
    if (a.given_max != nullptr) max_abs = kmath::given_row_max(a.given_max[n]);
    else for (std::uint64_t k = 0; k < a.k; ++k) max_abs = kmath::abs_max_step(max_abs, quant_source<F16>(a.src, base + k));
    const float scale = kmath::quant_int8_scale(max_abs);
    a.scales[n] = scale;
    for (std::uint64_t k = 0; k < a.k; ++k) a.codes[base + k] = kmath::quant_int8_code(quant_source<F16>(a.src, base + k), scale);
  }
}

void quant_int8_rows(const Quant8Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  if (a.f16_src) quant_int8_rows_typed<true>(a, row_begin, row_end);
  else quant_int8_rows_typed<false>(a, row_begin, row_end);
}

}  // namespace

const RowKernels& portable_kernels() {
  static const RowKernels table{"portable", transpose_cols, to_f16_from_f32, to_f16_from_bf16, dequant_int4_rows, repack_int4_rows,
                                quant_int8_rows, copy};
  return table;
}

}  // namespace ballast::cpu
