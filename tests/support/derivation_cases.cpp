// The case builders and case lists of derivation_cases.hpp.
#include "support/derivation_cases.hpp"

#include <ballast/dtype.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

namespace ballast::test_cases {
namespace {

template <class T>
void put(std::vector<std::byte>& v, std::uint64_t index, T value) {
  std::memcpy(v.data() + index * sizeof(T), &value, sizeof(T));
}

std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::string shape_label(std::uint64_t rows, std::uint64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

// A float from one 64-bit draw: random sign and mantissa, exponent mostly
// within f16's normal range, sometimes in its subnormal range or beyond
// its largest value, and (when `wild`) any bit pattern at all.
float mixed_f32(std::mt19937_64& rng, bool wild) {
  const std::uint64_t r = rng();
  const auto sign_and_mantissa = static_cast<std::uint32_t>(r) & 0x807fffffu;
  const unsigned pick = static_cast<unsigned>(r >> 32) % 16;
  if (wild && pick == 0) return std::bit_cast<float>(static_cast<std::uint32_t>(r >> 24));
  // f32 exponent field 127+e: f16 normals are e in [-14, 15].
  const unsigned e = wild && pick == 1   ? 127 - 26 + static_cast<unsigned>(r >> 40) % 13  // f16 subnormal range
                     : wild && pick == 2 ? 127 + 15 + static_cast<unsigned>(r >> 40) % 4   // around f16 overflow
                                         : 127 - 12 + static_cast<unsigned>(r >> 40) % 24;
  return std::bit_cast<float>(sign_and_mantissa | (e << 23));
}

std::uint16_t f16_of(float f) { return ballast::reference::f16_from_f32(f); }

}  // namespace

DerivationCase transpose_case(DataType element, std::uint64_t rows, std::uint64_t cols, std::uint64_t seed) {
  DerivationCase c;
  c.label = "transpose " + std::string(ballast::dtype_name(element)) + " " + shape_label(rows, cols);
  c.shape.kind = Derivation::transpose;
  c.shape.src_type = element;
  c.shape.rows = rows;
  c.shape.cols = cols;
  c.src = random_bytes(rows * cols * (ballast::dtype_bits(element) / 8), seed);
  return c;
}

DerivationCase slice_case(DataType element, std::uint64_t rows, std::uint64_t src_cols, std::uint64_t col_offset,
                          std::uint64_t cols, std::uint64_t seed) {
  DerivationCase c;
  c.label = "slice " + std::string(ballast::dtype_name(element)) + " columns " + std::to_string(col_offset) + "+" +
            std::to_string(cols) + " of " + shape_label(rows, src_cols);
  c.shape.kind = Derivation::slice;
  c.shape.src_type = element;
  c.shape.rows = rows;
  c.shape.cols = cols;
  c.shape.src_cols = src_cols;
  c.shape.col_offset = col_offset;
  c.src = random_bytes(rows * src_cols * (ballast::dtype_bits(element) / 8), seed);
  return c;
}

DerivationCase to_f16_case(DataType source, std::uint64_t rows, std::uint64_t cols, bool special, std::uint64_t seed) {
  DerivationCase c;
  c.label = "to_f16 from " + std::string(ballast::dtype_name(source)) + " " + shape_label(rows, cols) +
            (special ? " with special values" : "");
  c.shape.kind = Derivation::to_f16;
  c.shape.src_type = source;
  c.shape.rows = rows;
  c.shape.cols = cols;
  const std::uint64_t n = rows * cols;
  std::mt19937_64 rng(seed);
  if (source == DataType::float32) {
    c.src.resize(n * 4);
    for (std::uint64_t i = 0; i < n; ++i) put(c.src, i, mixed_f32(rng, special));
    if (special) {
      const auto& s = f32_specials();
      for (std::uint64_t i = 0; i < n; i += 3) put(c.src, i, s[(i / 3) % s.size()]);
    }
  } else {
    c.src.resize(n * 2);
    for (std::uint64_t i = 0; i < n; ++i) {
      // bf16 is the top half of an f32.
      const auto bits = static_cast<std::uint16_t>(f32_bits(mixed_f32(rng, special)) >> 16);
      put(c.src, i, bits);
    }
    if (special) {
      const auto& s = half_specials();
      for (std::uint64_t i = 0; i < n; i += 3) put(c.src, i, s[(i / 3) % s.size()]);
    }
  }
  return c;
}

DerivationCase int4_case(Derivation kind, DataType scale_type, ZeroPoints zero_points, std::uint64_t n, std::uint64_t k,
                         std::uint32_t block_size, bool special, std::uint64_t seed) {
  static const char* const kZeroPointNames[] = {"no zero points", "packed zero points", "unpacked zero points"};
  DerivationCase c;
  c.label = std::string(ballast::derivation_name(kind)) + " " + std::string(ballast::dtype_name(scale_type)) +
            " scales, " + kZeroPointNames[static_cast<int>(zero_points)] + ", N=" + std::to_string(n) +
            " K=" + std::to_string(k) + " block_size=" + std::to_string(block_size) +
            (special ? " with special scales" : "");
  c.shape.kind = kind;
  c.shape.src_type = scale_type;
  c.shape.rows = n;
  c.shape.cols = k;
  c.shape.block_size = block_size;
  c.shape.zero_points = zero_points;
  auto sizes = ballast::derivation_sizes(c.shape);
  if (!sizes.ok()) return c;  // the runner reports the shape error
  std::mt19937_64 rng(seed);
  c.src = random_bytes(sizes->src_bytes, seed + 1);
  const std::uint64_t scale_count = n * ballast::k_blocks(k, block_size);
  const bool f32 = scale_type == DataType::float32;
  auto put_scale_type = [&](std::vector<std::byte>& v, std::uint64_t i, float value) {
    if (f32) {
      put(v, i, value);
    } else {
      put(v, i, f16_of(value));
    }
  };
  c.scales.resize(sizes->scales_bytes);
  for (std::uint64_t i = 0; i < scale_count; ++i) {
    std::uniform_real_distribution<float> mag(0.001f, 0.25f);
    put_scale_type(c.scales, i, ((rng() & 1) ? -1.0f : 1.0f) * mag(rng));
  }
  if (special) {
    // Scales that make (q - zp) * scale overflow f16, land in its subnormal
    // range, or carry NaN/inf/zero through.
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float huge = f32 ? 1e30f : 4096.0f, tiny = f32 ? 1e-30f : 1e-5f;
    const float specials[] = {65504.0f, 30000.0f, 1e-7f, -6e-8f, 0.0f, -0.0f, inf, nan, huge, tiny};
    for (std::uint64_t i = 0; i < scale_count; i += 2) put_scale_type(c.scales, i, specials[(i / 2) % 10]);
  }
  c.zero_points.resize(sizes->zero_point_bytes);
  if (zero_points == ZeroPoints::packed_u4) {
    c.zero_points = random_bytes(sizes->zero_point_bytes, seed + 2);
  } else if (zero_points == ZeroPoints::unpacked) {
    for (std::uint64_t i = 0; i < scale_count; ++i) put_scale_type(c.zero_points, i, static_cast<float>(rng() % 16));
  }
  return c;
}

DerivationCase quant_int8_case(DataType source, std::uint64_t rows, std::uint64_t cols, bool special,
                               std::uint64_t seed) {
  DerivationCase c;
  c.label = "quant_int8 from " + std::string(ballast::dtype_name(source)) + " " + shape_label(rows, cols) +
            (special ? " with special values" : "");
  c.shape.kind = Derivation::quant_int8;
  c.shape.src_type = source;
  c.shape.rows = rows;
  c.shape.cols = cols;
  std::mt19937_64 rng(seed);
  const bool f32 = source == DataType::float32;
  c.src.resize(rows * cols * (f32 ? 4 : 2));
  auto set = [&](std::uint64_t i, float v) {
    if (f32) {
      put(c.src, i, v);
    } else {
      put(c.src, i, f16_of(v));
    }
  };
  for (std::uint64_t r = 0; r < rows; ++r) {
    // Rows differ in magnitude so per-row scales matter; row 1 is all zero.
    const float row_scale = std::ldexp(1.0f, static_cast<int>(rng() % 16) - 8);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (std::uint64_t col = 0; col < cols; ++col) set(r * cols + col, r == 1 ? 0.0f : value(rng) * row_scale);
  }
  if (special && rows >= 6 && cols >= 4) {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float row2[] = {nan, 1.0f, -0.5f, 0.25f};        // NaN ignored for the scale, code 0
    const float row3[] = {inf, 1.0f, -inf, 0.0f};          // infinite scale
    const float row4[] = {1e-40f, -3e-41f, 0.0f, 1e-45f};  // subnormal f32 (zero in f16)
    const float row5[] = {-0.0f, 0.0f, -0.0f, 0.0f};
    const float* rows_[] = {row2, row3, row4, row5};
    for (int r = 0; r < 4; ++r)
      for (std::uint64_t col = 0; col < cols; ++col) set((r + 2) * cols + col, rows_[r][col % 4]);
    // Exact ties of w / scale at +-x.5 when the row max is 127.
    for (std::uint64_t col = 0; col < cols; ++col)
      set(0 * cols + col, col == 0 ? 127.0f : static_cast<float>(col % 255) * 0.5f - 63.5f);
  }
  if (special && rows >= 8 && cols >= 10) {
    // Rows 6 and 7: ties of both parities and signs, and the clamp reached
    // from both sides (see quant_int8_ties_row_value).
    for (std::uint64_t col = 0; col < cols; ++col) {
      set(6 * cols + col, quant_int8_ties_row_value(col));
      set(7 * cols + col, quant_int8_clamp_row_value(col));
    }
  }
  return c;
}

DerivationCase quant_int8_given_max_case(DataType source, std::uint64_t rows, std::uint64_t cols, bool special,
                                         std::uint64_t seed) {
  DerivationCase c = quant_int8_case(source, rows, cols, special, seed);
  c.label = "quant_int8_given_max" + c.label.substr(std::string("quant_int8").size());
  c.shape.kind = Derivation::quant_int8_given_max;
  const bool f32 = source == DataType::float32;
  // Each row's own max |w| (NaN left out), as the source holds it.
  auto own_max = [&](std::uint64_t r) {
    float m = 0.0f;
    for (std::uint64_t col = 0; col < cols; ++col) {
      float w;
      if (f32) {
        std::memcpy(&w, c.src.data() + 4 * (r * cols + col), 4);
      } else {
        std::uint16_t h;
        std::memcpy(&h, c.src.data() + 2 * (r * cols + col), 2);
        w = static_cast<float>(reference::f16_value(h));
      }
      if (!std::isnan(w) && std::fabs(w) > m) m = std::fabs(w);
    }
    return m;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  c.scales.resize(rows * 4);
  std::mt19937_64 rng(seed + 7);
  for (std::uint64_t r = 0; r < rows; ++r) {
    const float m = own_max(r);
    float given = m;
    switch (rng() % 4) {
      case 0: break;                               // the row's own: quant_int8's result
      case 1: given = m * 3.0f; break;             // a whole row's, larger than this part's
      case 2: given = m * 0.25f; break;            // below the row's own: codes clamp
      default: given = m == 0.0f ? 1.0f : m; break;
    }
    if (special) {
      const float specials[] = {-m, nan, 0.0f, inf, 1e-40f, -0.0f, -nan};
      if (r % 2 == 1) given = specials[(r / 2) % 7];
    }
    put(c.scales, r, given);
  }
  return c;
}

DerivationCase int4_wide_range_case(std::mt19937& rng, const DerivationLaunch& shape) {
  DerivationCase c;
  c.shape = shape;
  c.label = std::string(derivation_name(shape.kind)) + " " + std::to_string(shape.rows) + "x" +
            std::to_string(shape.cols) + " block_size=" + std::to_string(shape.block_size) + " (wide-range scales)";
  const std::uint64_t kb = k_blocks(shape.cols, shape.block_size);
  const bool f16 = shape.src_type == DataType::float16;
  c.src = random_bytes(rng, shape.rows * kb * shape.block_size / 2);
  std::vector<float> scales(shape.rows * kb), zps(shape.rows * kb);
  for (auto& x : scales) {
    const std::uint32_t pick = rng() % 16;
    x = pick == 0 ? awkward_f32(rng)
                  : std::ldexp(static_cast<float>(rng() % 2000) / 1000.0f - 1.0f, static_cast<int>(rng() % 40) - 30);
  }
  for (auto& z : zps) {
    const std::uint32_t pick = rng() % 20;
    z = pick == 0 ? NAN : pick == 1 ? 7.5f : pick == 2 ? -1.0f : static_cast<float>(rng() % 16);
  }
  auto as_type = [&](const std::vector<float>& v) {
    std::vector<std::byte> out(v.size() * (f16 ? 2 : 4));
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (f16) {
        put(out, i, f16_of(v[i]));
      } else {
        put(out, i, v[i]);
      }
    }
    return out;
  };
  c.scales = as_type(scales);
  if (shape.zero_points == ZeroPoints::packed_u4)
    c.zero_points = random_bytes(rng, shape.rows * ((kb + 1) / 2));
  else if (shape.zero_points == ZeroPoints::unpacked)
    c.zero_points = as_type(zps);
  return c;
}

DerivationCase int4_normal_case(std::mt19937& rng, const DerivationLaunch& shape) {
  DerivationCase c;
  c.shape = shape;
  c.label = std::string(derivation_name(shape.kind)) + " " + std::to_string(shape.rows) + "x" +
            std::to_string(shape.cols) + " block_size=" + std::to_string(shape.block_size);
  const std::uint64_t kb = k_blocks(shape.cols, shape.block_size);
  const bool f16 = shape.src_type == DataType::float16;
  c.src = random_bytes(rng, shape.rows * kb * shape.block_size / 2);
  auto push_typed = [&](std::vector<std::byte>& out, float v) {
    const std::size_t at = out.size();
    out.resize(at + (f16 ? 2 : 4));
    if (f16) {
      const std::uint16_t h = f16_of(v);
      std::memcpy(out.data() + at, &h, 2);
    } else {
      std::memcpy(out.data() + at, &v, 4);
    }
  };
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (std::uint64_t i = 0; i < shape.rows * kb; ++i) push_typed(c.scales, normal(rng));
  if (shape.zero_points == ZeroPoints::packed_u4) {
    c.zero_points = random_bytes(rng, shape.rows * ((kb + 1) / 2));
  } else if (shape.zero_points == ZeroPoints::unpacked) {
    std::uniform_real_distribution<float> z(-1.0f, 16.5f);
    for (std::uint64_t i = 0; i < shape.rows * kb; ++i) {
      const float v = i % 5 == 0 ? std::round(z(rng)) : (i % 7 == 0 ? 7.5f : z(rng));
      push_typed(c.zero_points, v);
    }
  }
  return c;
}

DerivationCase gguf_case(Derivation kind, DataType type, std::uint64_t rows, std::uint64_t blocks, bool special,
                         std::uint64_t seed) {
  DerivationCase c;
  const kinds::GgufBlock* block = kinds::gguf_block(type);
  const std::uint64_t elements = block != nullptr ? block->elements : 1, bytes = block != nullptr ? block->bytes : 1;
  c.label = std::string(derivation_name(kind)) + " " + std::string(dtype_name(type)) + " " +
            shape_label(rows, blocks * elements) + (special ? " with special scales" : "");
  c.shape.kind = kind;
  c.shape.src_type = type;
  c.shape.rows = rows;
  c.shape.cols = blocks * elements;
  c.src = random_bytes(rows * blocks * bytes, seed);
  if (special) return c;
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  // Byte offsets of each block's f16 scales (the f32 one of Q8_K apart).
  struct Scales {
    DataType type;
    int count;
    unsigned at[2];
  };
  static constexpr Scales kScales[] = {
      {DataType::q4_0, 1, {0}},       {DataType::q4_1, 2, {0, 2}},    {DataType::q5_0, 1, {0}},
      {DataType::q5_1, 2, {0, 2}},    {DataType::q8_0, 1, {0}},       {DataType::q2_k, 2, {80, 82}},
      {DataType::q3_k, 1, {108}},     {DataType::q4_k, 2, {0, 2}},    {DataType::q5_k, 2, {0, 2}},
      {DataType::q6_k, 1, {208}},
  };
  const std::uint64_t count = rows * blocks;
  if (type == DataType::float32) {
    c.src = random_f32(rng, count, -70000.0f, 70000.0f, false);
  } else if (type == DataType::float16 || type == DataType::bfloat16) {
    c.src = random_f16(rng, count, 30);  // bf16: the same bits read as the top of an f32
  } else if (type == DataType::q8_k) {
    for (std::uint64_t i = 0; i < count; ++i) {
      const auto d = random_f32(rng, 1, -0.01f, 0.01f, false);
      std::memcpy(c.src.data() + i * bytes, d.data(), 4);
    }
  } else {
    for (const Scales& s : kScales) {
      if (s.type != type) continue;
      for (std::uint64_t i = 0; i < count; ++i)
        for (int j = 0; j < s.count; ++j) {
          const auto d = random_f16(rng, 1, 16);  // |d| < 2^2, any sign, subnormals included
          std::memcpy(c.src.data() + i * bytes + s.at[j], d.data(), 2);
        }
    }
  }
  return c;
}

std::vector<DerivationCase> kernel_cases() {
  std::mt19937 rng(20261129);
  std::vector<DerivationCase> cases;
  // Small odd shapes (edge paths), and shapes with full 16-byte-aligned
  // tiles, slabs and chunks for the kernels' fast paths (with partial tiles
  // around them: 136 and 200 are multiples of 8 but not of the tiles).
  const std::pair<std::uint64_t, std::uint64_t> dims[] = {
      {1, 1}, {3, 5}, {17, 33}, {64, 40}, {7, 129}, {128, 256}, {136, 200}, {144, 272}, {2, 4112}, {5, 8192 + 32}};
  for (auto [r, c] : dims) {
    for (DataType t : {DataType::uint8, DataType::float16, DataType::float32, DataType::int64}) {
      if (r * c > 64 * 1024) continue;  // the long rows are for quant_int8
      DerivationCase k;
      k.shape.kind = Derivation::transpose;
      k.shape.src_type = t;
      k.shape.rows = r;
      k.shape.cols = c;
      k.src = random_bytes(rng, r * c * (dtype_bits(t) / 8));
      k.label = "transpose " + std::to_string(r) + "x" + std::to_string(c);
      cases.push_back(std::move(k));
    }
    for (DataType t : {DataType::float32, DataType::bfloat16}) {
      DerivationCase k;
      k.shape.kind = Derivation::to_f16;
      k.shape.src_type = t;
      k.shape.rows = r;
      k.shape.cols = c;
      k.src = t == DataType::float32 ? random_f32(rng, r * c, -70000.0f, 70000.0f, true) : random_bytes(rng, r * c * 2);
      k.label = "to_f16 " + std::to_string(r) + "x" + std::to_string(c);
      cases.push_back(std::move(k));
    }
    for (DataType t : {DataType::float32, DataType::float16}) {
      DerivationCase k;
      k.shape.kind = Derivation::quant_int8;
      k.shape.src_type = t;
      k.shape.rows = r;
      k.shape.cols = c;
      k.src = t == DataType::float32 ? random_f32(rng, r * c, -3.0f, 3.0f, false) : random_f16(rng, r * c, 20);
      if (r == 3)
        std::fill(k.src.begin(), k.src.begin() + static_cast<std::ptrdiff_t>(c * (t == DataType::float32 ? 4 : 2)),
                  std::byte{0});
      k.label = "quant_int8 " + std::to_string(r) + "x" + std::to_string(c);
      cases.push_back(std::move(k));
    }
  }
  // slice: every element width, a rank's columns at the left edge, inside
  // and at the right edge, one column, all of them, and odd offsets (no
  // alignment of a run beyond its element).
  std::uint64_t slice_seed = 900;
  for (DataType t : {DataType::uint8, DataType::float16, DataType::float32, DataType::int64})
    for (auto [rows, src_cols, offset, cols] : {std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>{1, 1, 0, 1},
                                                {3, 10, 0, 5}, {3, 10, 5, 5}, {17, 33, 7, 13}, {64, 256, 192, 64},
                                                {5, 4096 + 32, 1, 4096 + 31}, {9, 40, 39, 1}, {200, 3, 1, 2}})
      cases.push_back(slice_case(t, rows, src_cols, offset, cols, ++slice_seed));
  // quant_int8 rows whose quotients lie on half-integers (max 127, so the
  // scale is ~1): the kernels' reciprocal path must fall back to the exact
  // division there.
  for (std::uint64_t cols : {std::uint64_t{1040}, std::uint64_t{4128}}) {
    DerivationCase k;
    k.shape.kind = Derivation::quant_int8;
    k.shape.src_type = DataType::float32;
    k.shape.rows = 3;
    k.shape.cols = cols;
    std::vector<float> values(3 * cols);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = i % cols == 5 ? 127.0f : static_cast<float>(static_cast<int>(i % 254) - 127) + 0.5f;
    k.src.resize(values.size() * 4);
    std::memcpy(k.src.data(), values.data(), k.src.size());
    k.label = "quant_int8 half-integers 3x" + std::to_string(cols);
    cases.push_back(std::move(k));
  }
  // quant_int8_given_max, on the same paths (the fast slabs and the
  // element loop), with maxima at, above and below the rows' own.
  std::uint64_t given_seed = 800;
  for (auto [r, c] : {std::pair<std::uint64_t, std::uint64_t>{1, 1}, {3, 5}, {17, 33}, {8, 48}, {5, 4096 + 16}})
    for (DataType t : {DataType::float32, DataType::float16})
      for (bool special : {false, true}) cases.push_back(quant_int8_given_max_case(t, r, c, special, ++given_seed));
  // int4: N x K with block sizes where K is and is not a multiple.
  const struct {
    std::uint64_t n, k;
    std::uint32_t bs;
  } int4_dims[] = {{1, 1, 16},   {2, 16, 16},  {3, 37, 16},   {5, 100, 32}, {4, 200, 64}, {2, 300, 128},
                   {3, 256, 16}, {4, 512, 32}, {3, 448, 128}, {2, 264, 64}, {3, 96, 32}};
  // Every kind of the family (the table's `blocked` rows) with every
  // scale type its row takes.
  for (auto d : int4_dims) {
    for (const kinds::Kind& row : kinds::kTable) {
      if (!row.blocked) continue;
      const Derivation kind = row.kind;
      for (int ti = 0; ti < row.type_count; ++ti) {
        const DataType scale_type = row.types[ti];
        for (ZeroPoints zp : {ZeroPoints::absent, ZeroPoints::packed_u4, ZeroPoints::unpacked}) {
          DerivationCase k;
          k.shape.kind = kind;
          k.shape.src_type = scale_type;
          k.shape.rows = d.n;
          k.shape.cols = d.k;
          k.shape.block_size = d.bs;
          k.shape.zero_points = zp;
          const std::uint64_t kb = k_blocks(d.k, d.bs);
          k.src = random_bytes(rng, d.n * kb * d.bs / 2);
          k.scales = scale_type == DataType::float32 ? random_f32(rng, d.n * kb, -0.5f, 0.5f, false)
                                                     : random_f16(rng, d.n * kb, 14);
          if (zp == ZeroPoints::packed_u4) k.zero_points = random_bytes(rng, d.n * ((kb + 1) / 2));
          if (zp == ZeroPoints::unpacked) {
            // Integer and half-integer zero points, some outside 0..15 (padding codes clamp).
            std::vector<float> values(d.n * kb);
            for (auto& v : values) v = static_cast<float>(static_cast<int>(rng() % 38) - 2) * 0.5f;
            if (scale_type == DataType::float32) {
              k.zero_points.resize(values.size() * 4);
              std::memcpy(k.zero_points.data(), values.data(), k.zero_points.size());
            } else {
              k.zero_points.resize(values.size() * 2);
              for (std::size_t i = 0; i < values.size(); ++i) {
                const std::uint16_t bits = reference::f16_from_f32(values[i]);  // exact: halves of small integers
                std::memcpy(k.zero_points.data() + 2 * i, &bits, 2);
              }
            }
          }
          k.label = std::string(derivation_name(kind)) + " " + std::to_string(d.n) + "x" + std::to_string(d.k) + " bs" +
                    std::to_string(d.bs) + " zp" + std::to_string(static_cast<int>(zp)) + " scales " +
                    (scale_type == DataType::float32 ? "f32" : "f16");
          cases.push_back(std::move(k));
        }
      }
    }
  }
  // GGUF: every kind of the family (read from the kind table, so a new one
  // is covered as it is added) with every type it reads; one block, a few
  // odd rows of several blocks, and rows wide enough for a kernel's fast
  // path.
  std::uint64_t seed = 900;
  for (const kinds::Kind& k : kinds::kTable) {
    if (!k.gguf_blocks) continue;
    for (int i = 0; i < k.type_count; ++i) {
      const kinds::GgufBlock& b = *kinds::gguf_block(k.types[i]);
      for (auto [r, blocks] : {std::pair<std::uint64_t, std::uint64_t>{1, 1}, {3, 5}, {16, 4096 / b.elements}})
        for (bool special : {false, true}) cases.push_back(gguf_case(k.kind, b.type, r, blocks, special, ++seed));
    }
  }
  return cases;
}

}  // namespace ballast::test_cases
