// The derivations (the GGUF kinds in gguf_reference.cpp), one element at a time, indexed exactly as the format
// description reads (docs/derivations.md). Bytes are little-endian.
#include <reference/reference.hpp>
#include "reference/element_bytes.hpp"

#include <ballast/dtype.hpp>

#include <cmath>
#include <cstring>
#include <string>

namespace ballast::reference {

namespace {

Status need(std::span<const std::byte> have, std::uint64_t bytes, const char* operand) {
  if (have.size() >= bytes) return {};
  return make_error(ErrorCode::size_mismatch, std::string(operand) + " has " + std::to_string(have.size()) +
                                                   " bytes, the shape needs " + std::to_string(bytes));
}

// A scale or unpacked zero point: f32 or f16 by the launch's src_type.
float load_scale_type(std::span<const std::byte> bytes, std::uint64_t index, DataType type) {
  if (type == DataType::float32) return load<float>(bytes, index);
  return static_cast<float>(f16_value(load<std::uint16_t>(bytes, index)));
}

// Nibble `index` of a byte array, the even one in the low half of its byte.
unsigned nibble(std::span<const std::byte> bytes, std::uint64_t index) {
  const unsigned byte = std::to_integer<unsigned>(bytes[index / 2]);
  return index % 2 == 0 ? byte % 16 : byte / 16;
}

struct Int4View {
  const DerivationLaunch& shape;
  const Inputs& in;
  std::uint64_t kb;

  unsigned code(std::uint64_t n, std::uint64_t k) const {
    const std::uint64_t bs = shape.block_size;
    const std::uint64_t block = k / bs;
    const std::uint64_t row_block_bytes = (n * kb + block) * (bs / 2);
    return nibble(in.src.subspan(row_block_bytes, bs / 2), k % bs);
  }
  float scale(std::uint64_t n, std::uint64_t block) const {
    return load_scale_type(in.scales, n * kb + block, shape.src_type);
  }
  float zero_point(std::uint64_t n, std::uint64_t block) const {
    switch (shape.zero_points) {
      case ZeroPoints::absent: return 8.0f;
      case ZeroPoints::packed_u4: return static_cast<float>(nibble(in.zero_points, n * ((kb + 1) / 2) * 2 + block));
      case ZeroPoints::unpacked: return load_scale_type(in.zero_points, n * kb + block, shape.src_type);
    }
    return 8.0f;
  }
  // What a padding column holds: the zero point as a 4-bit code.
  unsigned zero_point_code(std::uint64_t n, std::uint64_t block) const {
    const float zp = zero_point(n, block);
    if (std::isnan(zp)) return 8;
    const double r = round_half_even(zp);
    return static_cast<unsigned>(r < 0 ? 0 : r > 15 ? 15 : r);
  }
};

}  // namespace

void derive_transpose(const DerivationLaunch& s, const Inputs& in, Outputs& out) {
  const std::uint64_t es = dtype_bits(s.src_type) / 8;
  for (std::uint64_t r = 0; r < s.rows; ++r)
    for (std::uint64_t c = 0; c < s.cols; ++c)
      std::memcpy(out.dst.data() + (c * s.rows + r) * es, in.src.data() + (r * s.cols + c) * es, es);
}

// Element by element, as the definition reads: out[r][c] = src[r][col_offset + c].
void derive_slice(const DerivationLaunch& s, const Inputs& in, Outputs& out) {
  const std::uint64_t es = dtype_bits(s.src_type) / 8;
  for (std::uint64_t r = 0; r < s.rows; ++r)
    for (std::uint64_t c = 0; c < s.cols; ++c)
      std::memcpy(out.dst.data() + (r * s.cols + c) * es, in.src.data() + (r * s.src_cols + s.col_offset + c) * es, es);
}

void derive_to_f16(const DerivationLaunch& s, const Inputs& in, Outputs& out) {
  const std::uint64_t n = s.rows * s.cols;
  for (std::uint64_t i = 0; i < n; ++i) {
    const double v = s.src_type == DataType::float32 ? static_cast<double>(load<float>(in.src, i))
                                                     : bf16_value(load<std::uint16_t>(in.src, i));
    store<std::uint16_t>(out.dst, i, f16_from_double(v));
  }
}

void derive_dequant_int4(const DerivationLaunch& s, const Inputs& in, Outputs& out) {
  const Int4View v{s, in, k_blocks(s.cols, s.block_size)};
  for (std::uint64_t n = 0; n < s.rows; ++n)
    for (std::uint64_t k = 0; k < s.cols; ++k) {
      const std::uint64_t block = k / s.block_size;
      const float difference = static_cast<float>(v.code(n, k)) - v.zero_point(n, block);
      const float value = difference * v.scale(n, block);
      store<std::uint16_t>(out.dst, n * s.cols + k, f16_from_f32(value));
    }
}

void derive_repack_int4(const DerivationLaunch& s, const Inputs& in, Outputs& out) {
  static constexpr unsigned kColumnOfNibble[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const Int4View v{s, in, k_blocks(s.cols, s.block_size)};
  const std::uint64_t words_per_row = (s.cols + 7) / 8;
  for (std::uint64_t n = 0; n < s.rows; ++n)
    for (std::uint64_t j = 0; j < words_per_row; ++j) {
      std::uint32_t word = 0;
      for (unsigned i = 0; i < 8; ++i) {
        const std::uint64_t col = 8 * j + kColumnOfNibble[i];
        const unsigned code = col < s.cols ? v.code(n, col) : v.zero_point_code(n, col / s.block_size);
        word += static_cast<std::uint32_t>(code) * (1u << (4 * i));
      }
      store<std::uint32_t>(out.dst, n * words_per_row + j, word);
    }
  for (std::uint64_t n = 0; n < s.rows; ++n)
    for (std::uint64_t b = 0; b < v.kb; ++b) {
      const float scale = v.scale(n, b);
      const float product = scale * v.zero_point(n, b);
      store<std::uint16_t>(out.dst2, 2 * (n * v.kb + b), f16_from_f32(scale));
      store<std::uint16_t>(out.dst2, 2 * (n * v.kb + b) + 1, f16_from_f32(-product));
    }
}

namespace {

// quant_int8 of every row, its maximum from the row itself, or (given)
// from the f32 [N] scales input: its magnitude, NaN read as 0.
void quantize_rows(const DerivationLaunch& s, const Inputs& in, Outputs& out, bool given) {
  auto weight = [&](std::uint64_t i) {
    return s.src_type == DataType::float32 ? load<float>(in.src, i)
                                           : static_cast<float>(f16_value(load<std::uint16_t>(in.src, i)));
  };
  const float inverse_127 = 1.0f / 127.0f;
  for (std::uint64_t n = 0; n < s.rows; ++n) {
    float max_abs = 0.0f;
    if (given) {
      const float m = load<float>(in.scales, n);
      max_abs = std::isnan(m) ? 0.0f : std::fabs(m);
    }
    for (std::uint64_t k = 0; k < s.cols && !given; ++k) {
      const float w = weight(n * s.cols + k);
      if (!std::isnan(w) && std::fabs(w) > max_abs) max_abs = std::fabs(w);
    }
    const float scale = max_abs * inverse_127;
    store<float>(out.dst2, n, scale);
    for (std::uint64_t k = 0; k < s.cols; ++k) {
      std::int8_t code = 0;
      if (scale != 0.0f) {
        const float ratio = weight(n * s.cols + k) / scale;
        if (!std::isnan(ratio)) code = static_cast<std::int8_t>(std::fmax(-127.0, std::fmin(127.0, round_half_even(ratio))));
      }
      store<std::int8_t>(out.dst, n * s.cols + k, code);
    }
  }
}

}  // namespace

void derive_quant_int8(const DerivationLaunch& s, const Inputs& in, Outputs& out) { quantize_rows(s, in, out, false); }

void derive_quant_int8_given_max(const DerivationLaunch& s, const Inputs& in, Outputs& out) {
  quantize_rows(s, in, out, true);
}

namespace {

// Every kind's reference, in the kind table's order, from the list they
// are declared by (reference.hpp).
struct ReferenceRow {
  Derivation kind;
  void (*run)(const DerivationLaunch&, const Inputs&, Outputs&);
};
#define BALLAST_REFERENCE_ROW(name) ReferenceRow{Derivation::name, derive_##name},
constexpr ReferenceRow kReferences[] = {BALLAST_DERIVATION_KINDS(BALLAST_REFERENCE_ROW)};
#undef BALLAST_REFERENCE_ROW
static_assert(kinds::covers_every_kind(kReferences), "the reference needs one function per derivation kind");

}  // namespace

Result<Outputs> derive(const DerivationLaunch& shape, const Inputs& in) {
  auto sizes = derivation_sizes(shape);
  if (!sizes) return std::move(sizes.error()).with_context("reference " + std::string(derivation_name(shape.kind)));
  if (auto st = need(in.src, sizes->src_bytes, "src"); !st) return st;
  if (auto st = need(in.scales, sizes->scales_bytes, "scales"); !st) return st;
  if (auto st = need(in.zero_points, sizes->zero_point_bytes, "zero_points"); !st) return st;
  Outputs out;
  out.dst.resize(sizes->dst_bytes);
  out.dst2.resize(sizes->dst2_bytes);
  kReferences[static_cast<int>(shape.kind)].run(shape, in, out);
  return out;
}

}  // namespace ballast::reference
