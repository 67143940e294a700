// dequant_gguf / dequant_gguf_f32 rows. Each block is decoded to f32 with
// its scales read once per block or sub-block (common/gguf_blocks.hpp has
// the field readers and the element-at-a-time form the GPU kernels use; the
// values here are the same IEEE operations in the same order, which the
// conformance cases check against the scalar reference). The portable
// decoders (kernels_gguf.inl) store f32 and round through the RowKernels
// table's to_f16_from_f32; on x86-64 with AVX2 + F16C the decoders below work
// eight codes at a time and round with F16C (the same bits as
// kmath::f16_bits_from_f32), the 4-bit types to f16 by a pshufb table of a
// sub-block's 16 values.
#include "kernels.hpp"

#include <common/gguf_blocks.hpp>

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ballast::cpu {

namespace {

namespace g = kmath::gguf;
using g::add;
using g::mul;
using g::sub;

namespace portable {
#define BALLAST_GGUF_TARGET
#include "kernels_gguf.inl"
#undef BALLAST_GGUF_TARGET
}  // namespace portable

#if defined(__x86_64__)
namespace avx2 {
#define BALLAST_GGUF_TARGET __attribute__((target("avx2,f16c")))
#define BALLAST_GGUF_FAST_DECODE
#include "kernels_gguf.inl"

// Eight codes per step in 32-bit lanes, then one convert, one multiply
// (and one add or subtract) per eight values: the operations and their
// order are decode<Type>'s, so the bits are too.
#define S BALLAST_GGUF_TARGET inline

S __m256i u8x8(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
S __m256i i8x8(const std::uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
// A block's f16 scale by F16C: the same value as kmath's f32_from_f16_bits
// (a signalling NaN quietened, payload kept), without its branches.
S float h16(const std::uint8_t* b, std::uint32_t at) {
  return _cvtsh_ss(static_cast<unsigned short>(g::u16_at(b, at)));
}
// (v >> shift) & mask in every lane, the shift the same for all.
S __m256i field(__m256i v, std::uint32_t shift, std::int32_t mask) {
  return _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(static_cast<int>(shift))), _mm256_set1_epi32(mask));
}
// Eight values to f32, or rounded to f16 by F16C (the same bits as
// kmath::f16_bits_from_f32), at y.
S void store(float* y, __m256 v) { _mm256_storeu_ps(y, v); }
S void store(std::uint16_t* y, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
template <class Out>
S void put(Out* y, __m256i q, __m256 d) { store(y, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d)); }
template <class Out>
S void put_add(Out* y, __m256i q, __m256 d, __m256 m) { store(y, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), d), m)); }
template <class Out>
S void put_sub(Out* y, __m256i q, __m256 d, __m256 m) { store(y, _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), d), m)); }

template <std::uint32_t Type>
BALLAST_GGUF_TARGET void fast_decode(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t n) {
  decode<Type>(b, y, n);  // the plain float types
}

// Q4_0 / Q4_1: elements 0..15 the low nibbles of the 16 code bytes, 16..31 the high.
template <bool Offset, class Out>
BALLAST_GGUF_TARGET void q4_01(const std::uint8_t* __restrict b, Out* __restrict y) {
  const __m256 d = _mm256_set1_ps(h16(b, 0));
  const __m256 m = _mm256_set1_ps(Offset ? h16(b, 2) : 0.0f);
  const std::uint8_t* qs = b + (Offset ? 4 : 2);
  for (std::uint32_t half = 0; half < 2; ++half)
    for (std::uint32_t j = 0; j < 16; j += 8) {
      const __m256i q = field(u8x8(qs + j), 4 * half, 15);
      if (Offset) put_add(y + 16 * half + j, q, d, m);
      else put(y + 16 * half + j, _mm256_sub_epi32(q, _mm256_set1_epi32(8)), d);
    }
}

// Q5_0 / Q5_1: as Q4, plus bit e of the u32 qh as bit 4 of element e.
template <bool Offset, class Out>
BALLAST_GGUF_TARGET void q5_01(const std::uint8_t* __restrict b, Out* __restrict y) {
  const __m256 d = _mm256_set1_ps(h16(b, 0));
  const __m256 m = _mm256_set1_ps(Offset ? h16(b, 2) : 0.0f);
  const __m256i qh = _mm256_set1_epi32(static_cast<int>(g::u32_at(b, Offset ? 4 : 2)));
  const std::uint8_t* qs = b + (Offset ? 8 : 6);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (std::uint32_t e = 0; e < 32; e += 8) {
    const __m256i fifth = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(e)))),
                                           _mm256_set1_epi32(1));
    const __m256i q = _mm256_or_si256(field(u8x8(qs + (e & 15u)), e >= 16 ? 4 : 0, 15), _mm256_slli_epi32(fifth, 4));
    if (Offset) put_add(y + e, q, d, m);
    else put(y + e, _mm256_sub_epi32(q, _mm256_set1_epi32(16)), d);
  }
}

template <class Out>
BALLAST_GGUF_TARGET void q8_0(const std::uint8_t* __restrict b, Out* __restrict y) {
  const __m256 d = _mm256_set1_ps(h16(b, 0));
  for (std::uint32_t j = 0; j < 32; j += 8) put(y + j, i8x8(b + 2 + j), d);
}
template <class Out>
BALLAST_GGUF_TARGET void q8_k(const std::uint8_t* __restrict b, Out* __restrict y) {
  const __m256 d = _mm256_set1_ps(kmath::f32_from_bits(g::u32_at(b, 0)));
  for (std::uint32_t j = 0; j < 256; j += 8) put(y + j, i8x8(b + 4 + j), d);
}

template <class Out>
BALLAST_GGUF_TARGET void q2_k(const std::uint8_t* __restrict b, Out* __restrict y) {
  // Each sub-block's four values (d * sc) * q - dmin * mn, q = 0..3, as a
  // table the codes index with vpermps (computed by the same operations as
  // element by element, so the same bits).
  __m256 table[16];
  const float d = h16(b, 80), dmin = h16(b, 82);
  const __m256 q = _mm256_cvtepi32_ps(_mm256_setr_epi32(0, 1, 2, 3, 0, 0, 0, 0));
  for (std::uint32_t k = 0; k < 16; ++k)
    table[k] = _mm256_sub_ps(_mm256_mul_ps(q, _mm256_set1_ps(mul(d, fl(b[k] & 15u)))),
                             _mm256_set1_ps(mul(dmin, fl(static_cast<std::uint32_t>(b[k] >> 4)))));
  // Each eight code bytes hold four sub-blocks' codes (k = 8h + 2j + g, shift 2j).
  for (std::uint32_t h = 0; h < 2; ++h)
    for (std::uint32_t g = 0; g < 2; ++g)
      for (std::uint32_t l = 0; l < 16; l += 8) {
        const __m256i v = u8x8(b + 16 + 32 * h + 16 * g + l);
        for (std::uint32_t j = 0; j < 4; ++j) {
          const std::uint32_t k = 8 * h + 2 * j + g;
          store(y + 16 * k + l, _mm256_permutevar8x32_ps(table[k], field(v, 2 * j, 3)));
        }
      }
}

template <class Out>
BALLAST_GGUF_TARGET void q3_k(const std::uint8_t* __restrict b, Out* __restrict y) {
  // Each sub-block's eight values (d * sc) * v, v = q - 4 * !high = idx - 4
  // with idx = q + 4 * high, as a table idx indexes with vpermps.
  __m256 table[16];
  const float d = h16(b, 108);
  const __m256 v = _mm256_cvtepi32_ps(_mm256_setr_epi32(-4, -3, -2, -1, 0, 1, 2, 3));
  for (std::uint32_t k = 0; k < 16; ++k) table[k] = _mm256_mul_ps(_mm256_set1_ps(mul(d, fl(g::q3k_scale(b, 96, k)))), v);
  // Eight code bytes and eight high-bit bytes serve four sub-blocks each
  // (k = 8h + 2j + g: code shift 2j, high bit 4h + j).
  for (std::uint32_t half = 0; half < 2; ++half)
    for (std::uint32_t l = 0; l < 16; l += 8) {
      const __m256i hm = u8x8(b + 16 * half + l);
      for (std::uint32_t h = 0; h < 2; ++h) {
        const __m256i qs = u8x8(b + 32 + 32 * h + 16 * half + l);
        for (std::uint32_t j = 0; j < 4; ++j) {
          const std::uint32_t k = 8 * h + 2 * j + half;
          const __m256i idx = _mm256_or_si256(field(qs, 2 * j, 3), _mm256_slli_epi32(field(hm, 4 * h + j, 1), 2));
          store(y + 16 * k + l, _mm256_permutevar8x32_ps(table[k], idx));
        }
      }
    }
}

template <bool Five, class Out>
BALLAST_GGUF_TARGET void q45k(const std::uint8_t* __restrict b, Out* __restrict y) {
  const float d = h16(b, 0), dmin = h16(b, 2);
  const std::uint8_t* qs = b + (Five ? 48 : 16);
  for (std::uint32_t c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high) share 32 bytes
    const std::uint32_t s0 = 2 * c, s1 = 2 * c + 1;
    const __m256 d0 = _mm256_set1_ps(mul(d, fl(g::k_scale(b, 4, s0)))), m0 = _mm256_set1_ps(mul(dmin, fl(g::k_min(b, 4, s0))));
    const __m256 d1 = _mm256_set1_ps(mul(d, fl(g::k_scale(b, 4, s1)))), m1 = _mm256_set1_ps(mul(dmin, fl(g::k_min(b, 4, s1))));
    for (std::uint32_t l = 0; l < 32; l += 8) {
      const __m256i v = u8x8(qs + 32 * c + l);
      __m256i lo = field(v, 0, 15), hi = field(v, 4, 15);
      if (Five) {
        const __m256i qh = u8x8(b + 16 + l);
        lo = _mm256_or_si256(lo, _mm256_slli_epi32(field(qh, s0, 1), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi32(field(qh, s1, 1), 4));
      }
      put_sub(y + 32 * s0 + l, lo, d0, m0);
      put_sub(y + 32 * s1 + l, hi, d1, m1);
    }
  }
}

template <class Out>
BALLAST_GGUF_TARGET void q6_k(const std::uint8_t* __restrict b, Out* __restrict y) {
  alignas(32) float dl[16];
  const __m256 d = _mm256_set1_ps(h16(b, 208));
  for (std::uint32_t t = 0; t < 16; t += 8) _mm256_store_ps(dl + t, _mm256_mul_ps(d, _mm256_cvtepi32_ps(i8x8(b + 192 + t))));
  const __m256i bias = _mm256_set1_epi32(32);
  // Per half h and eight l: ql[64h + l] gives k = 0 (low) and 2 (high
  // nibble), ql[64h + 32 + l] k = 1 and 3, qh[32h + l] the top bits of all four.
  for (std::uint32_t h = 0; h < 2; ++h)
    for (std::uint32_t l = 0; l < 32; l += 8) {
      const __m256i a = u8x8(b + 64 * h + l), c = u8x8(b + 64 * h + 32 + l), qh = u8x8(b + 128 + 32 * h + l);
      const __m256i low[4] = {field(a, 0, 15), field(c, 0, 15), field(a, 4, 15), field(c, 4, 15)};
      for (std::uint32_t k = 0; k < 4; ++k) {
        const __m256i q = _mm256_or_si256(low[k], _mm256_slli_epi32(field(qh, 2 * k, 3), 4));
        const std::uint32_t t = 8 * h + 2 * k + l / 16;  // (128h + 32k + l) / 16
        put(y + 128 * h + 32 * k + l, _mm256_sub_epi32(q, bias), _mm256_broadcast_ss(dl + t));
      }
    }
}

// Each type's decoder, to f32 (fast_decode) and straight to f16
// (fast_decode_f16), the type's value arithmetic written once above.
#define BALLAST_GGUF_AVX2(TYPE, DECODER)                                                                      \
  template <>                                                                                                 \
  BALLAST_GGUF_TARGET void fast_decode<TYPE>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) { \
    DECODER(b, y);                                                                                            \
  }                                                                                                           \
  template <>                                                                                                 \
  BALLAST_GGUF_TARGET void fast_decode_f16<TYPE>(const std::uint8_t* __restrict b, std::uint16_t* __restrict y) {   \
    DECODER(b, y);                                                                                            \
  }
// The 4-bit types to f16 by table: a sub-block's 16 possible values are
// computed once (the same operations on the same codes, so the same bits)
// and each code is looked up with pshufb, 32 at a time.
struct Table16 {
  __m256i lo, hi;  // the low and high bytes of the 16 f16, in both 128-bit lanes
};
S Table16 table16(__m256 v0, __m256 v1) {  // the values of codes 0..7 and 8..15
  const __m128i h0 = _mm256_cvtps_ph(v0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m128i h1 = _mm256_cvtps_ph(v1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m128i low_byte = _mm_set1_epi16(0x00ff);
  const __m128i lo = _mm_packus_epi16(_mm_and_si128(h0, low_byte), _mm_and_si128(h1, low_byte));
  const __m128i hi = _mm_packus_epi16(_mm_srli_epi16(h0, 8), _mm_srli_epi16(h1, 8));
  return {_mm256_broadcastsi128_si256(lo), _mm256_broadcastsi128_si256(hi)};
}
// 32 codes (bytes 0..15, in element order) to 32 f16 at y.
S void lookup32(std::uint16_t* y, __m256i codes, const Table16& t) {
  const __m256i l = _mm256_shuffle_epi8(t.lo, codes), h = _mm256_shuffle_epi8(t.hi, codes);
  const __m256i a = _mm256_unpacklo_epi8(l, h);  // elements 0-7 | 16-23
  const __m256i b = _mm256_unpackhi_epi8(l, h);  // elements 8-15 | 24-31
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm256_permute2x128_si256(a, b, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + 16), _mm256_permute2x128_si256(a, b, 0x31));
}
S __m256i codes_0_15() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
// Q4_0 / Q4_1: 16 code bytes, low nibbles elements 0..15, high 16..31.
template <bool Offset>
BALLAST_GGUF_TARGET void q4_01_f16(const std::uint8_t* __restrict b, std::uint16_t* __restrict y) {
  const __m256 d = _mm256_set1_ps(h16(b, 0));
  const __m256i i0 = codes_0_15(), i1 = _mm256_add_epi32(i0, _mm256_set1_epi32(8));
  Table16 t;
  if (Offset) {
    const __m256 m = _mm256_set1_ps(h16(b, 2));
    t = table16(_mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(i0), d), m),
                _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(i1), d), m));
  } else {
    const __m256i eight = _mm256_set1_epi32(8);
    t = table16(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(i0, eight)), d),
                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(i1, eight)), d));
  }
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (Offset ? 4 : 2)));
  const __m128i nibble = _mm_set1_epi8(15);
  const __m128i low = _mm_and_si128(qs, nibble), high = _mm_and_si128(_mm_srli_epi16(qs, 4), nibble);
  lookup32(y, _mm256_set_m128i(high, low), t);
}
// Q4_K to f16: sub-blocks 2c and 2c + 1 are the low and high nibbles of the
// same 32 bytes, each with its own (d * sc, dmin * mn).
BALLAST_GGUF_TARGET void q4k_f16(const std::uint8_t* __restrict b, std::uint16_t* __restrict y) {
  const float d = h16(b, 0), dmin = h16(b, 2);
  const __m256 i0 = _mm256_cvtepi32_ps(codes_0_15()), i1 = _mm256_cvtepi32_ps(_mm256_add_epi32(codes_0_15(), _mm256_set1_epi32(8)));
  const __m256i nibble = _mm256_set1_epi8(15);
  for (std::uint32_t c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * c));
    for (std::uint32_t half = 0; half < 2; ++half) {
      const std::uint32_t s = 2 * c + half;
      const __m256 d1 = _mm256_set1_ps(mul(d, fl(g::k_scale(b, 4, s)))), m1 = _mm256_set1_ps(mul(dmin, fl(g::k_min(b, 4, s))));
      const Table16 t = table16(_mm256_sub_ps(_mm256_mul_ps(i0, d1), m1), _mm256_sub_ps(_mm256_mul_ps(i1, d1), m1));
      const __m256i codes = half == 0 ? _mm256_and_si256(v, nibble) : _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
      lookup32(y + 32 * s, codes, t);
    }
  }
}

#define BALLAST_GGUF_AVX2_F32(TYPE, DECODER)                                                                  \
  template <>                                                                                                 \
  BALLAST_GGUF_TARGET void fast_decode<TYPE>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) { \
    DECODER(b, y);                                                                                            \
  }
BALLAST_GGUF_AVX2_F32(g::kQ4_0, q4_01<false>)
BALLAST_GGUF_AVX2_F32(g::kQ4_1, q4_01<true>)
BALLAST_GGUF_AVX2_F32(g::kQ4_K, q45k<false>)
#undef BALLAST_GGUF_AVX2_F32
template <>
BALLAST_GGUF_TARGET void fast_decode_f16<g::kQ4_0>(const std::uint8_t* __restrict b, std::uint16_t* __restrict y) {
  q4_01_f16<false>(b, y);
}
template <>
BALLAST_GGUF_TARGET void fast_decode_f16<g::kQ4_1>(const std::uint8_t* __restrict b, std::uint16_t* __restrict y) {
  q4_01_f16<true>(b, y);
}
template <>
BALLAST_GGUF_TARGET void fast_decode_f16<g::kQ4_K>(const std::uint8_t* __restrict b, std::uint16_t* __restrict y) {
  q4k_f16(b, y);
}
BALLAST_GGUF_AVX2(g::kQ5_0, q5_01<false>)
BALLAST_GGUF_AVX2(g::kQ5_1, q5_01<true>)
BALLAST_GGUF_AVX2(g::kQ8_0, q8_0)
BALLAST_GGUF_AVX2(g::kQ8_K, q8_k)
BALLAST_GGUF_AVX2(g::kQ2_K, q2_k)
BALLAST_GGUF_AVX2(g::kQ3_K, q3_k)
BALLAST_GGUF_AVX2(g::kQ5_K, q45k<true>)
BALLAST_GGUF_AVX2(g::kQ6_K, q6_k)
#undef BALLAST_GGUF_AVX2
#undef S

#undef BALLAST_GGUF_FAST_DECODE
#undef BALLAST_GGUF_TARGET
}  // namespace avx2
#endif

struct TypeRow {
  std::uint32_t type;
  void (*rows)(const GgufArgs&, std::uint64_t, std::uint64_t);
  void (*rows_avx2)(const GgufArgs&, std::uint64_t, std::uint64_t);
};

template <std::uint32_t T>
constexpr TypeRow row() {
#if defined(__x86_64__)
  return {T, portable::rows_of<T>, avx2::rows_of<T>};
#else
  return {T, portable::rows_of<T>, portable::rows_of<T>};
#endif
}

constexpr TypeRow kTypes[] = {row<g::kF32>(),  row<g::kF16>(),  row<g::kBF16>(), row<g::kQ4_0>(), row<g::kQ4_1>(),
                              row<g::kQ5_0>(), row<g::kQ5_1>(), row<g::kQ8_0>(), row<g::kQ2_K>(), row<g::kQ3_K>(),
                              row<g::kQ4_K>(), row<g::kQ5_K>(), row<g::kQ6_K>(), row<g::kQ8_K>()};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == sizeof(kinds::kGgufBlocks) / sizeof(kinds::kGgufBlocks[0]),
              "one CPU row per GGUF type the kinds read");

}  // namespace

void repack_gguf_int4_rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  const std::uint64_t blocks = a.cols / a.block_elements;
  for (std::uint64_t r = row_begin; r < row_end; ++r) {
    const std::uint8_t* block = a.src + r * blocks * a.block_bytes;
    std::uint32_t* words = a.words + r * (a.cols / 8);
    std::uint8_t* pairs = a.pairs + 4 * r * blocks;
    for (std::uint64_t i = 0; i < blocks; ++i, block += a.block_bytes) {
      for (std::uint32_t j = 0; j < 4; ++j) words[4 * i + j] = g::q4_repack_word(a.type, block, j);
      const std::uint32_t pair = g::q4_repack_pair(a.type, block);
      std::memcpy(pairs + 4 * i, &pair, 4);
    }
  }
}

void dequant_gguf_rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  for (const TypeRow& t : kTypes)
    if (t.type == a.type) return (a.avx2 ? t.rows_avx2 : t.rows)(a, row_begin, row_end);
}

}  // namespace ballast::cpu
