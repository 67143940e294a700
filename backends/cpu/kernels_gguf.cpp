// The GGUF kinds on the CPU: run_dequant_gguf, run_dequant_gguf_f32 and
// run_repack_gguf_int4 (kernels.hpp), and their rows. Each block is decoded to f32 with
// its scales read once per block or sub-block (common/gguf_blocks.hpp has
// the field readers and the element-at-a-time form the GPU kernels use; the
// values here are the same IEEE operations in the same order, which the
// conformance cases check against the scalar reference). The portable
// decoders (kernels_gguf.inl) store f32 and round through the RowKernels
// table's to_f16_from_f32; on x86-64 with AVX2 + F16C the decoders below work
// eight codes at a time and round with F16C (the same bits as
// kmath::f16_bits_from_f32), and outputs of kStreamBytes or more are written
// with non-temporal stores (kernels.hpp says why). (A pshufb table of a
// sub-block's 16 f16 values for the 4-bit types measured slower than this
// once the stores stream: 10 against 18.5 GB/s for Q4_0, docs/benchmarks.md.)
// Where the CPU has AVX-512 BW, every quantized type but Q8_K decodes to f16
// in namespace avx512: most by a vpermw lookup of 32 codes at a time in a
// table of the block's possible f16 values, one output line per lookup.
#include "kernels.hpp"

#include <common/gguf_blocks.hpp>

#include <cstring>
#include <type_traits>

#include "x86_intrinsics.hpp"

#include "thread_pool.hpp"

namespace ballast::cpu {

namespace {

// One launch of a GGUF kind, as its row functions read it.
struct GgufArgs {
  std::uint32_t type = 0;                // a kinds::kGgufBlocks type, as DataType numbers it
  std::uint32_t block_elements = 0, block_bytes = 0;
  const std::uint8_t* src = nullptr;     // [rows, cols / block_elements, block_bytes]
  std::uint64_t rows = 0, cols = 0;
  std::uint16_t* f16_out = nullptr;      // dequant_gguf: [rows, cols]
  float* f32_out = nullptr;              // dequant_gguf_f32: [rows, cols]
  // The table's f32 -> f16 rounding (F16C where the CPU has it).
  void (*to_f16)(const float* src, std::uint16_t* dst, std::uint64_t count, bool stream) = nullptr;
  // The decoders built for AVX2 + F16C (x86-64 with the vectorised table),
  // and for AVX-512 BW to f16 (the table that adds them, simd512_kernels).
  bool avx2 = false;
  bool avx512 = false;
  // The AVX2 decoders write with non-temporal stores: set for outputs of at
  // least kStreamBytes whose address is 32-byte aligned (kernels.cpp).
  bool stream = false;
  // repack_gguf_int4: [rows, cols / 8] words and [rows, blocks] pairs (each
  // a 4-byte little-endian word of two f16; only 2-byte aligned, as
  // repack_int4's: written with memcpy).
  std::uint32_t* words = nullptr;
  std::uint8_t* pairs = nullptr;
};

namespace g = kmath::gguf;
using g::add;
using g::mul;
using g::sub;

#if defined(__x86_64__)
// The source of a run of blocks prefetched 2 KiB ahead of the block being
// decoded, a line at a time as the blocks reach it. Past the cache on the
// second Xeon of the benchmarks, the hardware prefetcher alone left the
// AVX-512 decoders at 0.69-0.80 of the line copy for Q5_K/Q6_K and
// 0.78-0.79 for Q8_0; with this, 0.84-1.07 and 0.87-0.93.
struct Prefetch {
  static constexpr std::uint64_t kAhead = 2048;
  const char* next;
  explicit Prefetch(const std::uint8_t* first) : next(reinterpret_cast<const char*>(first) + kAhead) {}
  // Everything up to kAhead past the end of the block at `blk`.
  void through(const std::uint8_t* blk, std::uint32_t block_bytes) {
    for (; next < reinterpret_cast<const char*>(blk) + block_bytes + kAhead; next += 64)
      _mm_prefetch(next, _MM_HINT_T0);
  }
};
#endif

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
// (v >> shift) & mask in every 16-bit lane.
S __m256i field16(__m256i v, std::uint32_t shift, std::int16_t mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(static_cast<int>(shift))), _mm256_set1_epi16(mask));
}
S __m128i f16x8(__m256 v) { return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// Eight values to f32, or rounded to f16 by F16C (the same bits as
// kmath::f16_bits_from_f32), at y: a plain pointer, or a Streamed one
// (GgufArgs::stream) whose stores are non-temporal.
S void store(float* y, __m256 v) { _mm256_storeu_ps(y, v); }
S void store(std::uint16_t* y, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(y), f16x8(v)); }
S void store(Streamed<float> y, __m256 v) { _mm256_stream_ps(y.p, v); }
S void store(Streamed<std::uint16_t> y, __m256 v) { _mm_stream_si128(reinterpret_cast<__m128i*>(y.p), f16x8(v)); }
// 16 f16 (32 bytes) at y.
S void store16(std::uint16_t* y, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), v); }
S void store16(Streamed<std::uint16_t> y, __m256i v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(y.p), v); }
// Sixteen values, two groups of eight, at y: f16 in one 32-byte store.
S void store2(float* y, __m256 a, __m256 b) { store(y, a), store(y + 8, b); }
S void store2(Streamed<float> y, __m256 a, __m256 b) { store(y, a), store(y + 8, b); }
S void store2(std::uint16_t* y, __m256 a, __m256 b) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm256_set_m128i(f16x8(b), f16x8(a)));
}
S void store2(Streamed<std::uint16_t> y, __m256 a, __m256 b) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(y.p), _mm256_set_m128i(f16x8(b), f16x8(a)));
}
S __m256 value(__m256i q, __m256 d) { return _mm256_mul_ps(_mm256_cvtepi32_ps(q), d); }
S __m128i u8x16(const std::uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
S __m128i upper8(__m128i v) { return _mm_srli_si128(v, 8); }
// (v >> shift) & mask in every byte (mask keeps the bits shifted in from
// the byte above out of the result).
S __m128i bits8(__m128i v, std::uint32_t shift, std::int8_t mask) {
  return _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(static_cast<int>(shift))), _mm_set1_epi8(mask));
}
template <class Y>
S void put(Y y, __m256i q, __m256 d) { store(y, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d)); }
template <class Y>
S void put_add(Y y, __m256i q, __m256 d, __m256 m) { store(y, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), d), m)); }
template <class Y>
S void put_sub(Y y, __m256i q, __m256 d, __m256 m) { store(y, _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), d), m)); }

// Q4_0 / Q4_1: elements 0..15 the low nibbles of the 16 code bytes, 16..31 the high.
template <bool Offset, class Y>
BALLAST_GGUF_TARGET void q4_01(const std::uint8_t* __restrict b, Y y) {
  const __m256 d = _mm256_set1_ps(h16(b, 0));
  const __m256 m = _mm256_set1_ps(Offset ? h16(b, 2) : 0.0f);
  // The 16 code bytes split into elements 0..15 (low nibbles) and 16..31
  // (high), less 8 for Q4_0, as bytes; then eight at a time to 32 bits.
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (Offset ? 4 : 2)));
  const __m128i nibble = _mm_set1_epi8(15);
  __m128i codes[2] = {_mm_and_si128(qs, nibble), _mm_and_si128(_mm_srli_epi16(qs, 4), nibble)};
  for (__m128i& c : codes) {
    if (!Offset) c = _mm_sub_epi8(c, _mm_set1_epi8(8));
  }
  for (std::uint32_t half = 0; half < 2; ++half) {
    const __m128i c = codes[half], upper = _mm_srli_si128(c, 8);
    if (Offset) {
      store2(y + 16 * half, _mm256_add_ps(value(_mm256_cvtepu8_epi32(c), d), m),
             _mm256_add_ps(value(_mm256_cvtepu8_epi32(upper), d), m));
    } else {
      store2(y + 16 * half, value(_mm256_cvtepi8_epi32(c), d), value(_mm256_cvtepi8_epi32(upper), d));
    }
  }
}

// Q5_0 / Q5_1: as Q4, plus bit e of the u32 qh as bit 4 of element e.
template <bool Offset, class Y>
BALLAST_GGUF_TARGET void q5_01(const std::uint8_t* __restrict b, Y y) {
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

template <class Y>
BALLAST_GGUF_TARGET void q8_0(const std::uint8_t* __restrict b, Y y) {
  const __m256 d = _mm256_set1_ps(h16(b, 0));
  for (std::uint32_t j = 0; j < 32; j += 16) store2(y + j, value(i8x8(b + 2 + j), d), value(i8x8(b + 10 + j), d));
}
template <class Y>
BALLAST_GGUF_TARGET void q8_k(const std::uint8_t* __restrict b, Y y) {
  const __m256 d = _mm256_set1_ps(kmath::f32_from_bits(g::u32_at(b, 0)));
  for (std::uint32_t j = 0; j < 256; j += 16) store2(y + j, value(i8x8(b + 4 + j), d), value(i8x8(b + 12 + j), d));
}

// Whether a destination takes f16 (plain or streamed).
template <class Y>
constexpr bool kToF16 = std::is_same_v<Y, std::uint16_t*> || std::is_same_v<Y, Streamed<std::uint16_t>>;

// The decoders to f16 of Q2_K and Q3_K look their values up: a sub-block's
// possible values, computed in f32 by the operations below and rounded by
// F16C, are at most eight f16 (16 bytes, one pshufb table, the same in both
// 128-bit lanes), and its 16 codes, widened to words, become the byte pairs
// (2c, 2c + 1) of each word's entry. One pshufb gives 16 f16 where the f32
// form takes two vpermps and two conversions (on the Xeon of
// docs/benchmarks.md these two types were the AVX2 table's slowest).
// Word c of `codes` (each < 8) as the byte indices of f16 entry c + first.
S __m256i entry_bytes(__m256i codes, std::int16_t first) {
  return _mm256_add_epi16(_mm256_mullo_epi16(codes, _mm256_set1_epi16(0x0202)),
                          _mm256_set1_epi16(static_cast<std::int16_t>(0x0100 + 0x0202 * first)));
}
// Sixteen f16 entries of `table` (the same 16 bytes in both lanes) at y.
template <class Y>
S void look16(Y y, __m256i table, __m256i bytes) {
  store16(y, _mm256_shuffle_epi8(table, bytes));
}
// Eight f32 values as f16 in both 128-bit lanes.
S __m256i both_lanes(__m256 v) {
  const __m128i h = f16x8(v);
  return _mm256_set_m128i(h, h);
}
S __m256i u8x16_words(const std::uint8_t* p) { return _mm256_cvtepu8_epi16(u8x16(p)); }

// Q2_K to f16: the values q * (d * sc_k) - dmin * m_k of sub-blocks k and
// k + 1 (q = 0..3) are one table of eight; k = 8h + 2j + g reads code bits
// 2j of the 16 bytes at 16 + 32h + 16g.
template <class Y>
BALLAST_GGUF_TARGET void q2_k_f16(const std::uint8_t* __restrict b, Y y) {
  const float d = h16(b, 80), dmin = h16(b, 82);
  const __m256 q = _mm256_cvtepi32_ps(_mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3));
  __m256 dl[2], ml[2];
  for (std::uint32_t i = 0; i < 2; ++i) {
    const __m256i sc = u8x8(b + 8 * i);
    dl[i] = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_and_si256(sc, _mm256_set1_epi32(15))));
    ml[i] = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_srli_epi32(sc, 4)));
  }
  for (std::uint32_t h = 0; h < 2; ++h) {
    const __m256i codes[2] = {u8x16_words(b + 16 + 32 * h), u8x16_words(b + 32 + 32 * h)};
    for (std::uint32_t j = 0; j < 4; ++j) {
      const std::uint32_t k = 8 * h + 2 * j;  // within dl[h]: lanes 2j and 2j + 1
      const __m256i pick = _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1);
      const __m256i table = both_lanes(_mm256_sub_ps(_mm256_mul_ps(_mm256_permutevar8x32_ps(dl[h], pick), q),
                                                     _mm256_permutevar8x32_ps(ml[h], pick)));
      for (std::uint32_t g = 0; g < 2; ++g)
        look16(y + 16 * (k + g), table, entry_bytes(field16(codes[g], 2 * j, 3), static_cast<std::int16_t>(4 * g)));
    }
  }
}

// Q3_K to f16: sub-block k's values (d * sc_k) * (idx - 4), idx = q + 4 *
// high = 0..7, are one table; k = 8h + 2j + half reads code bits 2j of the
// 16 bytes at 32 + 32h + 16 half and high bit 4h + j of those at 16 half.
// The sixteen scales are found eight at a time (g::q3k_scale's fields: for
// k and k + 8, low nibble and high nibble of byte 96 + k; bits 2 (k >> 2)
// of byte 104 + (k & 3)), and the tables go through memory: a broadcast
// load takes no shuffle port, which the lookups need.
template <class Y>
BALLAST_GGUF_TARGET void q3_k_f16(const std::uint8_t* __restrict b, Y y) {
  const __m256i low = u8x8(b + 96);
  const __m256i high = _mm256_cvtepu8_epi32(_mm_set1_epi32(static_cast<int>(g::u32_at(b, 104))));
  const __m256 d = _mm256_set1_ps(h16(b, 108));
  alignas(32) float dl[16];
  for (std::uint32_t i = 0; i < 2; ++i) {
    const __m256i low4 = i == 0 ? _mm256_and_si256(low, _mm256_set1_epi32(15)) : _mm256_srli_epi32(low, 4);
    const __m256i high2 =
        _mm256_and_si256(_mm256_srlv_epi32(high, _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(4 * i)),
                                                                  _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2))),
                         _mm256_set1_epi32(3));
    const __m256i sc = _mm256_sub_epi32(_mm256_or_si256(low4, _mm256_slli_epi32(high2, 4)), _mm256_set1_epi32(32));
    _mm256_store_ps(dl + 8 * i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
  }
  const __m256 v = _mm256_cvtepi32_ps(_mm256_setr_epi32(-4, -3, -2, -1, 0, 1, 2, 3));
  alignas(16) std::uint16_t tables[16][8];
  for (std::uint32_t k = 0; k < 16; ++k)
    _mm_store_si128(reinterpret_cast<__m128i*>(tables[k]), f16x8(_mm256_mul_ps(_mm256_broadcast_ss(dl + k), v)));
  const __m256i highs[2] = {u8x16_words(b), u8x16_words(b + 16)};
  for (std::uint32_t h = 0; h < 2; ++h) {
    const __m256i codes[2] = {u8x16_words(b + 32 + 32 * h), u8x16_words(b + 48 + 32 * h)};
    for (std::uint32_t j = 0; j < 4; ++j)
      for (std::uint32_t half = 0; half < 2; ++half) {
        const std::uint32_t k = 8 * h + 2 * j + half;
        const __m256i idx =
            _mm256_or_si256(field16(codes[half], 2 * j, 3), _mm256_slli_epi16(field16(highs[half], 4 * h + j, 1), 2));
        const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(tables[k])));
        look16(y + 16 * k, table, entry_bytes(idx, 0));
      }
  }
}

template <class Y>
BALLAST_GGUF_TARGET void q2_k(const std::uint8_t* __restrict b, Y y) {
  if constexpr (kToF16<Y>) return q2_k_f16(b, y);
  // Each sub-block's four values (d * sc) * q - dmin * mn, q = 0..3, as a
  // table the codes index with vpermps (computed by the same operations as
  // element by element, so the same bits).
  __m256 table[16];
  const float d = h16(b, 80), dmin = h16(b, 82);
  const __m256 q = _mm256_cvtepi32_ps(_mm256_setr_epi32(0, 1, 2, 3, 0, 0, 0, 0));
  for (std::uint32_t k = 0; k < 16; ++k)
    table[k] = _mm256_sub_ps(_mm256_mul_ps(q, _mm256_set1_ps(mul(d, fl(b[k] & 15u)))),
                             _mm256_set1_ps(mul(dmin, fl(static_cast<std::uint32_t>(b[k] >> 4)))));
  // Each eight code bytes hold four sub-blocks' codes (k = 8h + 2j + g,
  // shift 2j); sub-blocks 2m and 2m + 1 fill one 64-byte f16 line, written
  // one after the other (a streamed line completes).
  for (std::uint32_t h = 0; h < 2; ++h) {
    const __m256i v[2][2] = {{u8x8(b + 16 + 32 * h), u8x8(b + 24 + 32 * h)}, {u8x8(b + 32 + 32 * h), u8x8(b + 40 + 32 * h)}};
    for (std::uint32_t j = 0; j < 4; ++j)
      for (std::uint32_t g = 0; g < 2; ++g) {
        const std::uint32_t k = 8 * h + 2 * j + g;
        store2(y + 16 * k, _mm256_permutevar8x32_ps(table[k], field(v[g][0], 2 * j, 3)),
               _mm256_permutevar8x32_ps(table[k], field(v[g][1], 2 * j, 3)));
      }
  }
}

template <class Y>
BALLAST_GGUF_TARGET void q3_k(const std::uint8_t* __restrict b, Y y) {
  if constexpr (kToF16<Y>) return q3_k_f16(b, y);
  // Each sub-block's eight values (d * sc) * v, v = q - 4 * !high = idx - 4
  // with idx = q + 4 * high, as a table idx indexes with vpermps.
  __m256 table[16];
  const float d = h16(b, 108);
  const __m256 v = _mm256_cvtepi32_ps(_mm256_setr_epi32(-4, -3, -2, -1, 0, 1, 2, 3));
  for (std::uint32_t k = 0; k < 16; ++k) table[k] = _mm256_mul_ps(_mm256_set1_ps(mul(d, fl(g::q3k_scale(b, 96, k)))), v);
  // Eight code bytes and eight high-bit bytes serve four sub-blocks each
  // (k = 8h + 2j + half: code shift 2j, high bit 4h + j); the two halves of
  // a 64-byte f16 line are written one after the other.
  const __m256i hm[2][2] = {{u8x8(b), u8x8(b + 8)}, {u8x8(b + 16), u8x8(b + 24)}};
  for (std::uint32_t h = 0; h < 2; ++h) {
    const __m256i qs[2][2] = {{u8x8(b + 32 + 32 * h), u8x8(b + 40 + 32 * h)}, {u8x8(b + 48 + 32 * h), u8x8(b + 56 + 32 * h)}};
    for (std::uint32_t j = 0; j < 4; ++j)
      for (std::uint32_t half = 0; half < 2; ++half) {
        const std::uint32_t k = 8 * h + 2 * j + half;
        __m256 v[2];
        for (std::uint32_t i = 0; i < 2; ++i) {
          const __m256i idx =
              _mm256_or_si256(field(qs[half][i], 2 * j, 3), _mm256_slli_epi32(field(hm[half][i], 4 * h + j, 1), 2));
          v[i] = _mm256_permutevar8x32_ps(table[k], idx);
        }
        store2(y + 16 * k, v[0], v[1]);
      }
  }
}

template <bool Five, class Y>
BALLAST_GGUF_TARGET void q45k(const std::uint8_t* __restrict b, Y y) {
  const float d = h16(b, 0), dmin = h16(b, 2);
  const std::uint8_t* qs = b + (Five ? 48 : 16);
  for (std::uint32_t c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high) share 32 bytes
    const std::uint32_t s0 = 2 * c, s1 = 2 * c + 1;
    const __m256 d0 = _mm256_set1_ps(mul(d, fl(g::k_scale(b, 4, s0)))), m0 = _mm256_set1_ps(mul(dmin, fl(g::k_min(b, 4, s0))));
    const __m256 d1 = _mm256_set1_ps(mul(d, fl(g::k_scale(b, 4, s1)))), m1 = _mm256_set1_ps(mul(dmin, fl(g::k_min(b, 4, s1))));
    // The 32 codes of each sub-block as bytes; each sub-block's 64-byte f16
    // line is written whole before the next (a streamed line completes).
    __m128i lo[2], hi[2];
    for (std::uint32_t i = 0; i < 2; ++i) {
      const __m128i v = u8x16(qs + 32 * c + 16 * i);
      lo[i] = bits8(v, 0, 15), hi[i] = bits8(v, 4, 15);
      if (Five) {
        const __m128i qh = u8x16(b + 16 + 16 * i);
        lo[i] = _mm_or_si128(lo[i], _mm_slli_epi16(bits8(qh, s0, 1), 4));
        hi[i] = _mm_or_si128(hi[i], _mm_slli_epi16(bits8(qh, s1, 1), 4));
      }
    }
    for (std::uint32_t i = 0; i < 2; ++i)
      store2(y + 32 * s0 + 16 * i, _mm256_sub_ps(value(_mm256_cvtepu8_epi32(lo[i]), d0), m0),
             _mm256_sub_ps(value(_mm256_cvtepu8_epi32(upper8(lo[i])), d0), m0));
    for (std::uint32_t i = 0; i < 2; ++i)
      store2(y + 32 * s1 + 16 * i, _mm256_sub_ps(value(_mm256_cvtepu8_epi32(hi[i]), d1), m1),
             _mm256_sub_ps(value(_mm256_cvtepu8_epi32(upper8(hi[i])), d1), m1));
  }
}

template <class Y>
BALLAST_GGUF_TARGET void q6_k(const std::uint8_t* __restrict b, Y y) {
  alignas(32) float dl[16];
  const __m256 d = _mm256_set1_ps(h16(b, 208));
  for (std::uint32_t t = 0; t < 16; t += 8) _mm256_store_ps(dl + t, _mm256_mul_ps(d, _mm256_cvtepi32_ps(i8x8(b + 192 + t))));
  // Per half h and sixteen l, as bytes: ql[64h + l] gives k = 0 (low) and 2
  // (high nibble), ql[64h + 32 + l] k = 1 and 3, qh[32h + l] the top bits of
  // all four; q - 32 fits a signed byte.
  // Each k's 32 values are one 64-byte f16 line, written whole.
  const __m128i bias = _mm_set1_epi8(32);
  for (std::uint32_t h = 0; h < 2; ++h) {
    __m128i q[4][2];
    for (std::uint32_t i = 0; i < 2; ++i) {
      const std::uint32_t l = 16 * i;
      const __m128i a = u8x16(b + 64 * h + l), c = u8x16(b + 64 * h + 32 + l), qh = u8x16(b + 128 + 32 * h + l);
      const __m128i low[4] = {bits8(a, 0, 15), bits8(c, 0, 15), bits8(a, 4, 15), bits8(c, 4, 15)};
      for (std::uint32_t k = 0; k < 4; ++k)
        q[k][i] = _mm_sub_epi8(_mm_or_si128(low[k], _mm_slli_epi16(bits8(qh, 2 * k, 3), 4)), bias);
    }
    for (std::uint32_t k = 0; k < 4; ++k)
      for (std::uint32_t i = 0; i < 2; ++i) {
        const __m256 scale = _mm256_broadcast_ss(dl + 8 * h + 2 * k + i);  // (128h + 32k + 16i) / 16
        store2(y + 128 * h + 32 * k + 16 * i, value(_mm256_cvtepi8_epi32(q[k][i]), scale),
               value(_mm256_cvtepi8_epi32(upper8(q[k][i])), scale));
      }
  }
}

// Each type's decoder, to f32 or f16 (the pointer's type), plain or
// Streamed (the type's value arithmetic written once above).
#define BALLAST_GGUF_AVX2(TYPE, DECODER)                                              \
  template <>                                                                     \
  struct Fast<TYPE> {                                                             \
    template <class Y>                                                            \
    BALLAST_GGUF_TARGET static void block(const std::uint8_t* __restrict b, Y y) { \
      DECODER(b, y);                                                              \
    }                                                                             \
  };
BALLAST_GGUF_AVX2(g::kQ4_0, q4_01<false>)
BALLAST_GGUF_AVX2(g::kQ4_1, q4_01<true>)
BALLAST_GGUF_AVX2(g::kQ4_K, q45k<false>)
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

// AVX-512 BW forms of the decoders to f16 (the f32 outputs keep AVX2's).
// Every value a code can take in a block (or sub-block) is computed once,
// in f32 by decode<Type>'s operations in its order, and rounded to f16 by
// F16C: a table of 32 f16 words that vpermw indexes with 32 codes at a
// time, one 64-byte output line per lookup. A table entry is the value
// every element with that code gets, so the bits are decode<Type>'s.
namespace avx512 {
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))
#define S T512 inline

using avx2::h16;  // a block's f16 scale by F16C (AVX2's target is a subset of this one's)
S __m256i f16x16(__m512 v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// Two sixteens of f16 as one table of 32.
S __m512i table(__m512 low, __m512 high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(f16x16(low)), f16x16(high), 1);
}
// 32 byte codes (each < 32) looked up in a table of 32 f16.
S __m512i look(__m256i codes, __m512i t) { return _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(codes), t); }
S __m256i u8x32(const std::uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// (v >> shift) & mask in every byte.
S __m256i bits(__m256i v, std::uint32_t shift, std::int8_t mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(static_cast<int>(shift))), _mm256_set1_epi8(mask));
}
// Byte offsets into a table: `low` for the first 16 codes, `high` for the rest.
S __m256i offsets(std::int8_t low, std::int8_t high) {
  return _mm256_set_m128i(_mm_set1_epi8(high), _mm_set1_epi8(low));
}
S __m512 lanes(std::int32_t first) {  // first, first + 1, ... as f32
  return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_set1_epi32(first),
                                             _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
}
// One 64-byte line of 32 f16 at y; streamed as two 32-byte halves (a
// streamed base is only 32-byte aligned, kernels.cpp).
template <bool Stream>
S void line(std::uint16_t* y, __m512i v) {
  if constexpr (Stream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(y), _mm512_castsi512_si256(v));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(y + 16), _mm512_extracti64x4_epi64(v, 1));
  } else {
    _mm512_storeu_si512(y, v);
  }
}

// Q4_0: (q - 8) * d; Q4_1: q * d + m. Codes 0..15 low nibbles, then high.
template <bool Offset, bool Stream>
T512 void q4_01(const std::uint8_t* __restrict b, std::uint16_t* y) {
  __m512 v = _mm512_mul_ps(lanes(Offset ? 0 : -8), _mm512_set1_ps(h16(b, 0)));
  if (Offset) v = _mm512_add_ps(v, _mm512_set1_ps(h16(b, 2)));
  const __m512i t = _mm512_castsi256_si512(f16x16(v));  // codes < 16 read only the low half
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (Offset ? 4 : 2)));
  const __m128i nibble = _mm_set1_epi8(15);
  line<Stream>(y, look(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), nibble), _mm_and_si128(qs, nibble)), t));
}

// Sixteen int8 codes at p, as f32, times d.
S __m512 i8_times(const std::uint8_t* p, __m512 d) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))), d);
}
// Q2_K's values of sub-blocks 4v .. 4v + 3: lane e is (dl * q) - ml of
// sub-block 4v + e / 4, q = e % 4.
S __m512 q2k_values(__m512 dl, __m512 ml, std::int32_t v) {
  const __m512 q = _mm512_cvtepi32_ps(_mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3));
  const __m512i k = _mm512_add_epi32(_mm512_set1_epi32(4 * v), _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  return _mm512_sub_ps(_mm512_mul_ps(_mm512_permutexvar_ps(k, dl), q), _mm512_permutexvar_ps(k, ml));
}
// Q3_K's values of sub-blocks 2 pair and 2 pair + 1: lane e is dl * (e % 8 - 4)
// of sub-block 2 pair + e / 8.
S __m512 q3k_values(__m512 dl, std::int32_t pair) {
  const __m512 v = _mm512_cvtepi32_ps(_mm512_setr_epi32(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3));
  const __m512i k = _mm512_add_epi32(_mm512_set1_epi32(2 * pair), _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  return _mm512_mul_ps(_mm512_permutexvar_ps(k, dl), v);
}
// Q4_K / Q5_K's values of a sub-block for q = first .. first + 15: (d1 * q) - m1.
S __m512 k_values(__m512 d1, __m512 m1, std::int32_t first) { return _mm512_sub_ps(_mm512_mul_ps(d1, lanes(first)), m1); }
S __m512 lane_of(__m512 v, std::uint32_t i) { return _mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int>(i)), v); }
// The 6-bit scales (lanes 0..7) and mins (8..15) of a Q4_K / Q5_K block,
// g::k_scale and g::k_min, from the 12 bytes at 4 (a masked load: nothing
// past them). Sub-block s < 4: byte s (scale) or 4 + s (min), & 63; s >= 4:
// the low four bits from byte 4 + s (scale: & 15, min: >> 4), the top two
// from byte s - 4 (scale) or s (min), >> 6.
S __m512i k_scales_mins(const std::uint8_t* b) {
  const __m512i raw = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(0x0fff, b + 4));
  const __m512i low = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11), raw);
  const __m512i top = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7), raw);
  const __m512i low_bits = _mm512_and_si512(_mm512_srlv_epi32(low, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4)),
                                            _mm512_setr_epi32(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
  const __m512i top_bits = _mm512_and_si512(_mm512_srli_epi32(top, 6), _mm512_setr_epi32(0, 0, 0, 0, 3, 3, 3, 3, 0, 0, 0, 0, 3, 3, 3, 3));
  return _mm512_or_si512(low_bits, _mm512_slli_epi32(top_bits, 4));
}

// Q8_0: int8 * d, sixteen at a time (no table: 256 codes).
template <bool Stream>
T512 void q8_0(const std::uint8_t* __restrict b, std::uint16_t* y) {
  const __m512 d = _mm512_set1_ps(h16(b, 0));
  line<Stream>(y, table(i8_times(b + 2, d), i8_times(b + 18, d)));
}

// Q2_K: sub-block k (16 elements) takes (d * sc_k) * q - dmin * m_k, q = 0..3:
// 64 values, two tables of eight sub-blocks (k = 8h + 2j + g).
template <bool Stream>
T512 void q2_k(const std::uint8_t* __restrict b, std::uint16_t* y) {
  const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  const __m512 dl = _mm512_mul_ps(_mm512_set1_ps(h16(b, 80)), _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15))));
  const __m512 ml = _mm512_mul_ps(_mm512_set1_ps(h16(b, 82)), _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)));
  const __m512i tables[2] = {table(q2k_values(dl, ml, 0), q2k_values(dl, ml, 1)),
                             table(q2k_values(dl, ml, 2), q2k_values(dl, ml, 3))};
  for (std::uint32_t h = 0; h < 2; ++h) {
    const __m256i qs = u8x32(b + 16 + 32 * h);  // sub-blocks 8h + 2j (first 16) and 8h + 2j + 1
    for (std::uint32_t j = 0; j < 4; ++j) {
      const auto at = static_cast<std::int8_t>(8 * j);
      line<Stream>(y + 16 * (8 * h + 2 * j), look(_mm256_add_epi8(bits(qs, 2 * j, 3), offsets(at, at + 4)), tables[h]));
    }
  }
}

// Q3_K: sub-block k takes (d * sc_k) * (idx - 4), idx = q + 4 * high = 0..7:
// 128 values, four tables of four sub-blocks.
template <bool Stream>
T512 void q3_k(const std::uint8_t* __restrict b, std::uint16_t* y) {
  // The 16 six-bit scales (g::q3k_scale) from the 12 bytes at 96: a masked
  // load, which reads nothing past them (the block ends at 110).
  const __m512i raw = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(0x0fff, b + 96));
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i low4 = _mm512_and_si512(
      _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_and_si512(k, _mm512_set1_epi32(7)), raw),
                        _mm512_slli_epi32(_mm512_srli_epi32(k, 3), 2)),
      _mm512_set1_epi32(15));
  const __m512i high2 = _mm512_and_si512(
      _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(_mm512_and_si512(k, _mm512_set1_epi32(3)), _mm512_set1_epi32(8)), raw),
                        _mm512_slli_epi32(_mm512_srli_epi32(k, 2), 1)),
      _mm512_set1_epi32(3));
  const __m512i sc = _mm512_sub_epi32(_mm512_or_si512(low4, _mm512_slli_epi32(high2, 4)), _mm512_set1_epi32(32));
  const __m512 dl = _mm512_mul_ps(_mm512_set1_ps(h16(b, 108)), _mm512_cvtepi32_ps(sc));
  const __m256i hm = u8x32(b);  // sub-block 8h + 2j + half: bit 4h + j of byte 16 half + l
  for (std::uint32_t h = 0; h < 2; ++h) {
    const auto p = static_cast<std::int32_t>(4 * h);
    const __m512i tables[2] = {table(q3k_values(dl, p), q3k_values(dl, p + 1)),
                               table(q3k_values(dl, p + 2), q3k_values(dl, p + 3))};
    const __m256i qs = u8x32(b + 32 + 32 * h);
    for (std::uint32_t j = 0; j < 4; ++j) {
      const __m256i idx = _mm256_or_si256(bits(qs, 2 * j, 3), _mm256_slli_epi16(bits(hm, 4 * h + j, 1), 2));
      const auto at = static_cast<std::int8_t>(16 * (j & 1u));  // sub-block 2j + half of the table's four: 8 each
      line<Stream>(y + 16 * (8 * h + 2 * j), look(_mm256_add_epi8(idx, offsets(at, at + 8)), tables[j >> 1]));
    }
  }
}

// Q4_K / Q5_K: sub-block s (32 elements) takes (d * sc_s) * q - dmin * m_s,
// q = 0..15 (Q4_K: two sub-blocks to a table) or 0..31 (Q5_K: one).
template <bool Five, bool Stream>
T512 void q45k(const std::uint8_t* __restrict b, std::uint16_t* y) {
  // d * sc_s in lanes 0..7, dmin * m_s in 8..15
  const __m512 dm = _mm512_mul_ps(_mm512_mask_blend_ps(0xff00, _mm512_set1_ps(h16(b, 0)), _mm512_set1_ps(h16(b, 2))),
                                  _mm512_cvtepi32_ps(k_scales_mins(b)));
  const std::uint8_t* qs = b + (Five ? 48 : 16);
  [[maybe_unused]] const __m256i qh = Five ? u8x32(b + 16) : _mm256_setzero_si256();
  for (std::uint32_t c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high) share 32 bytes
    const __m256i q = u8x32(qs + 32 * c);
    const std::uint32_t s0 = 2 * c, s1 = 2 * c + 1;
    if constexpr (Five) {
      const __m256i c0 = _mm256_or_si256(bits(q, 0, 15), _mm256_slli_epi16(bits(qh, s0, 1), 4));
      const __m256i c1 = _mm256_or_si256(bits(q, 4, 15), _mm256_slli_epi16(bits(qh, s1, 1), 4));
      const __m512 d0 = lane_of(dm, s0), m0 = lane_of(dm, 8 + s0), d1 = lane_of(dm, s1), m1 = lane_of(dm, 8 + s1);
      line<Stream>(y + 32 * s0, look(c0, table(k_values(d0, m0, 0), k_values(d0, m0, 16))));
      line<Stream>(y + 32 * s1, look(c1, table(k_values(d1, m1, 0), k_values(d1, m1, 16))));
    } else {
      const __m512i t = table(k_values(lane_of(dm, s0), lane_of(dm, 8 + s0), 0),  // codes of s1 read entries 16..31
                              k_values(lane_of(dm, s1), lane_of(dm, 8 + s1), 0));
      line<Stream>(y + 32 * s0, look(bits(q, 0, 15), t));
      line<Stream>(y + 32 * s1, look(_mm256_add_epi8(bits(q, 4, 15), _mm256_set1_epi8(16)), t));
    }
  }
}

// Q5_0: (q - 16) * d; Q5_1: q * d + m; q = nibble | bit e of qh << 4, the
// 32 bits of qh made bytes by a mask move.
template <bool Offset, bool Stream>
T512 void q5_01(const std::uint8_t* __restrict b, std::uint16_t* y) {
  const __m512 d = _mm512_set1_ps(h16(b, 0));
  __m512 low = _mm512_mul_ps(lanes(Offset ? 0 : -16), d), high = _mm512_mul_ps(lanes(Offset ? 16 : 0), d);
  if (Offset) {
    const __m512 m = _mm512_set1_ps(h16(b, 2));
    low = _mm512_add_ps(low, m), high = _mm512_add_ps(high, m);
  }
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + (Offset ? 8 : 6)));
  const __m128i nibble = _mm_set1_epi8(15);
  const __m256i codes = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), nibble), _mm_and_si128(qs, nibble));
  const __m256i fifth = _mm256_and_si256(_mm256_movm_epi8(g::u32_at(b, Offset ? 4 : 2)), _mm256_set1_epi8(16));
  line<Stream>(y, look(_mm256_or_si256(codes, fifth), table(low, high)));
}

// Q6_K: (d * sc_t) * (q - 32), sc_t per 16 elements; 64 codes, so no table:
// sixteen at a time widened, converted and multiplied.
template <bool Stream>
T512 void q6_k(const std::uint8_t* __restrict b, std::uint16_t* y) {
  const __m512 dl = i8_times(b + 192, _mm512_set1_ps(h16(b, 208)));  // lane t: d * sc_t
  for (std::uint32_t h = 0; h < 2; ++h) {
    const __m256i qh = u8x32(b + 128 + 32 * h);
    for (std::uint32_t k = 0; k < 4; ++k) {  // elements 128h + 32k + l: one 64-byte line
      const __m256i ql = u8x32(b + 64 * h + 32 * (k & 1u));
      const __m256i q = _mm256_sub_epi8(_mm256_or_si256(bits(ql, 4 * (k >> 1), 15), _mm256_slli_epi16(bits(qh, 2 * k, 3), 4)),
                                        _mm256_set1_epi8(32));
      const auto t = static_cast<int>(8 * h + 2 * k);
      const __m512 v0 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_set1_epi32(t), dl),
                                      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))));
      const __m512 v1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_set1_epi32(t + 1), dl),
                                      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))));
      line<Stream>(y + 128 * h + 32 * k, table(v0, v1));
    }
  }
}

// Rows of a quantized type to f16, block by block.
template <std::uint32_t Type, bool Stream>
T512 void block(const std::uint8_t* b, std::uint16_t* y) {
  if constexpr (Type == g::kQ4_0) q4_01<false, Stream>(b, y);
  else if constexpr (Type == g::kQ4_1) q4_01<true, Stream>(b, y);
  else if constexpr (Type == g::kQ8_0) q8_0<Stream>(b, y);
  else if constexpr (Type == g::kQ2_K) q2_k<Stream>(b, y);
  else if constexpr (Type == g::kQ3_K) q3_k<Stream>(b, y);
  else if constexpr (Type == g::kQ4_K) q45k<false, Stream>(b, y);
  else if constexpr (Type == g::kQ5_K) q45k<true, Stream>(b, y);
  else if constexpr (Type == g::kQ5_0) q5_01<false, Stream>(b, y);
  else if constexpr (Type == g::kQ5_1) q5_01<true, Stream>(b, y);
  else q6_k<Stream>(b, y);
}
// Rows of blocks, the source prefetched (Prefetch says why).
template <std::uint32_t Type, bool Stream>
T512 void rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  const std::uint64_t blocks = a.cols / a.block_elements;
  const std::uint8_t* blk = a.src + row_begin * blocks * a.block_bytes;
  const std::uint64_t end = row_end * a.cols;
  Prefetch ahead(blk);
  for (std::uint64_t at = row_begin * a.cols; at < end; at += a.block_elements, blk += a.block_bytes) {
    ahead.through(blk, a.block_bytes);
    block<Type, Stream>(blk, a.f16_out + at);
  }
  if constexpr (Stream) _mm_sfence();  // the streamed lines reach memory before the launch completes
}
template <std::uint32_t Type>
T512 void rows_of(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  return a.stream ? rows<Type, true>(a, row_begin, row_end) : rows<Type, false>(a, row_begin, row_end);
}
#undef S
#undef T512
}  // namespace avx512
#endif

struct TypeRow {
  std::uint32_t type;
  void (*rows)(const GgufArgs&, std::uint64_t, std::uint64_t);
  void (*rows_avx2)(const GgufArgs&, std::uint64_t, std::uint64_t);
  // To f16 with AVX-512 BW; nullptr: the AVX2 rows (the plain float types,
  // and Q8_K, which models do not store).
  void (*rows_avx512_f16)(const GgufArgs&, std::uint64_t, std::uint64_t);
};

template <std::uint32_t T>
constexpr TypeRow row() {
#if defined(__x86_64__)
  constexpr bool wide = T == g::kQ4_0 || T == g::kQ4_1 || T == g::kQ5_0 || T == g::kQ5_1 || T == g::kQ8_0 ||
                        T == g::kQ2_K || T == g::kQ3_K || T == g::kQ4_K || T == g::kQ5_K || T == g::kQ6_K;
  if constexpr (wide) return {T, portable::rows_of<T>, avx2::rows_of<T>, avx512::rows_of<T>};
  else return {T, portable::rows_of<T>, avx2::rows_of<T>, nullptr};
#else
  return {T, portable::rows_of<T>, portable::rows_of<T>, nullptr};
#endif
}

constexpr TypeRow kTypes[] = {row<g::kF32>(),  row<g::kF16>(),  row<g::kBF16>(), row<g::kQ4_0>(), row<g::kQ4_1>(),
                              row<g::kQ5_0>(), row<g::kQ5_1>(), row<g::kQ8_0>(), row<g::kQ2_K>(), row<g::kQ3_K>(),
                              row<g::kQ4_K>(), row<g::kQ5_K>(), row<g::kQ6_K>(), row<g::kQ8_K>()};
static_assert(sizeof(kTypes) / sizeof(kTypes[0]) == sizeof(kinds::kGgufBlocks) / sizeof(kinds::kGgufBlocks[0]),
              "one CPU row per GGUF type the kinds read");

// Rows of a repack_gguf_int4 launch (Q4_0 / Q4_1 into repack_int4's layout).
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

// Rows [row_begin, row_end) of a dequant_gguf(_f32) launch: one decoder
// per type, the AVX2 one where the table is the vectorised one.
void dequant_gguf_rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  for (const TypeRow& t : kTypes) {
    if (t.type != a.type) continue;
    if (a.avx512 && a.f16_out != nullptr && t.rows_avx512_f16 != nullptr) return t.rows_avx512_f16(a, row_begin, row_end);
    return (a.avx2 ? t.rows_avx2 : t.rows)(a, row_begin, row_end);
  }
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

void dequant(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  GgufArgs a = gguf_args(l);
  a.to_f16 = kernels.to_f16_from_f32;
  // Those tables exist only where the CPU has AVX2 and F16C (and AVX-512 BW).
  a.avx512 = &kernels == simd512_kernels();
  a.avx2 = a.avx512 || &kernels == simd_kernels();
  const bool f16 = l.kind == Derivation::dequant_gguf;
  if (f16) a.f16_out = as<std::uint16_t>(l.dst);
  else a.f32_out = as<float>(l.dst);
  // Every block's output starts 64 bytes after the last (32 elements at
  // least), so an aligned base keeps every streamed store aligned.
  a.stream = a.rows * a.cols * (f16 ? 2 : 4) >= kStreamBytes && l.dst % 32 == 0;
  pool.parallel_for(a.rows, [&](std::uint64_t r0, std::uint64_t r1) { dequant_gguf_rows(a, r0, r1); },
                    chunks_for(pool, a.rows));
}

}  // namespace

void run_dequant_gguf(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) { dequant(l, kernels, pool); }
void run_dequant_gguf_f32(const DerivationLaunch& l, const RowKernels& kernels, ThreadPool& pool) {
  dequant(l, kernels, pool);
}

void run_repack_gguf_int4(const DerivationLaunch& l, const RowKernels&, ThreadPool& pool) {
  GgufArgs a = gguf_args(l);
  a.words = as<std::uint32_t>(l.dst);
  a.pairs = as<std::uint8_t>(l.dst2);
  pool.parallel_for(a.rows, [&](std::uint64_t r0, std::uint64_t r1) { repack_gguf_int4_rows(a, r0, r1); },
                    chunks_for(pool, a.rows));
}

}  // namespace ballast::cpu
