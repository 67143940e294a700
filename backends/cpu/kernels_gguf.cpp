// dequant_gguf / dequant_gguf_f32 rows: each block decoded to f32 through
// common/gguf_blocks.hpp (the arithmetic every backend shares), then stored
// as f32 or rounded to f16. One instantiation per block type, so the
// per-element switch folds away and the loops over a block vectorise.
#include "kernels.hpp"

#include <common/gguf_blocks.hpp>

#include <cstring>

namespace ballast::cpu {

namespace {

namespace g = kmath::gguf;

// Plain float sources are blocks of one element: decode them 256 at a time.
constexpr std::uint32_t kPlainRun = 256;

template <std::uint32_t Type>
void decode(const std::uint8_t* b, float* y, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) y[i] = g::block_value(Type, b, i);
}

template <std::uint32_t Type>
void rows_of(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  const bool plain = a.block_elements == 1;
  const std::uint64_t run = plain ? kPlainRun : a.block_elements;  // elements decoded at once
  const std::uint64_t run_bytes = plain ? kPlainRun * a.block_bytes : a.block_bytes;
  const std::uint64_t row_bytes = a.cols / a.block_elements * a.block_bytes;
  float values[kPlainRun];
  for (std::uint64_t r = row_begin; r < row_end; ++r) {
    const std::uint8_t* row = a.src + r * row_bytes;
    for (std::uint64_t c = 0; c < a.cols; c += run) {
      const auto n = static_cast<std::uint32_t>(a.cols - c < run ? a.cols - c : run);
      decode<Type>(row + c / run * run_bytes, values, n);
      const std::uint64_t at = r * a.cols + c;
      if (a.f32_out != nullptr) {
        std::memcpy(a.f32_out + at, values, n * sizeof(float));
      } else {
        for (std::uint32_t i = 0; i < n; ++i) a.f16_out[at + i] = kmath::f16_bits_from_f32(values[i]);
      }
    }
  }
}

struct TypeRow {
  std::uint32_t type;
  void (*rows)(const GgufArgs&, std::uint64_t, std::uint64_t);
};

template <std::uint32_t T>
constexpr TypeRow row() {
  return {T, rows_of<T>};
}

constexpr TypeRow kTypes[] = {row<g::kF32>(),  row<g::kF16>(),  row<g::kBF16>(), row<g::kQ4_0>(), row<g::kQ4_1>(),
                              row<g::kQ5_0>(), row<g::kQ5_1>(), row<g::kQ8_0>(), row<g::kQ2_K>(), row<g::kQ3_K>(),
                              row<g::kQ4_K>(), row<g::kQ5_K>(), row<g::kQ6_K>(), row<g::kQ8_K>()};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == sizeof(kinds::kGgufBlocks) / sizeof(kinds::kGgufBlocks[0]),
              "one CPU row per GGUF type the kinds read");

}  // namespace

void dequant_gguf_rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  for (const TypeRow& t : kTypes)
    if (t.type == a.type) return t.rows(a, row_begin, row_end);
}

}  // namespace ballast::cpu
