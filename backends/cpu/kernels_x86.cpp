// Row kernels vectorised by hand for x86-64 CPUs with AVX2 and F16C (every
// x86-64 CPU since about 2013), chosen at run time so the library itself
// still runs on any x86-64. Same bits as the portable table: the f16
// conversion is F16C's vcvtps2ph with round-to-nearest-even, which matches
// kernel_math.hpp bit for bit (tests/backends/cpu checks both tables), and the
// f32 arithmetic is the same IEEE operations in the same order.
#include "int4_access.hpp"
#include "kernels.hpp"
#include "system_info.hpp"
#include "x86_intrinsics.hpp"

#include <common/kernel_math.hpp>

#include <cpuid.h>

#include <algorithm>
#include <cstring>

#define BALLAST_SIMD __attribute__((target("avx2,f16c")))

namespace ballast::cpu {

namespace {

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT;

// ---------------------------------------------------------------- transpose
// Register transposes of one small square block (16x16 bytes, 8x8 of 2-
// and 4-byte elements, 4x4 of 8-byte ones): every load and store is a
// vector.
BALLAST_SIMD inline void block8x8_u32(const std::uint32_t* src, std::uint64_t src_stride, std::uint32_t* dst,
                                      std::uint64_t dst_stride) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + i * src_stride));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + i * dst_stride), _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + (i + 4) * dst_stride), _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

// Two 8x8 blocks of 2-byte elements side by side (8 rows x 16 columns),
// one per 128-bit lane: rows interleaved in pairs, then pairs of pairs,
// then halves, as in any unpack-based 8x8 transpose.
BALLAST_SIMD inline void block8x16_u16(const std::uint16_t* src, std::uint64_t src_stride, std::uint16_t* dst,
                                       std::uint64_t dst_stride) {
  __m256i a[8], b[8], c[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * src_stride));
  for (int i = 0; i < 8; i += 2) {
    b[i] = _mm256_unpacklo_epi16(a[i], a[i + 1]);
    b[i + 1] = _mm256_unpackhi_epi16(a[i], a[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    c[i] = _mm256_unpacklo_epi32(b[i], b[i + 2]);
    c[i + 1] = _mm256_unpackhi_epi32(b[i], b[i + 2]);
    c[i + 2] = _mm256_unpacklo_epi32(b[i + 1], b[i + 3]);
    c[i + 3] = _mm256_unpackhi_epi32(b[i + 1], b[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    const __m256i even = _mm256_unpacklo_epi64(c[i], c[i + 4]), odd = _mm256_unpackhi_epi64(c[i], c[i + 4]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * i) * dst_stride), _mm256_castsi256_si128(even));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * i + 1) * dst_stride), _mm256_castsi256_si128(odd));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (8 + 2 * i) * dst_stride), _mm256_extracti128_si256(even, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (8 + 2 * i + 1) * dst_stride), _mm256_extracti128_si256(odd, 1));
  }
}

// Two 16x16 byte blocks side by side (16 rows x 32 columns), one per
// 128-bit lane, with the unpack steps of a 16x16 byte transpose: bytes, then pairs,
// quads and halves of rows interleaved.
BALLAST_SIMD inline void block16x32_u8(const std::uint8_t* src, std::uint64_t src_stride, std::uint8_t* dst,
                                       std::uint64_t dst_stride) {
  __m256i a[16], b[16], c[16], d[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * src_stride));
  for (int i = 0; i < 16; i += 2) {
    b[i] = _mm256_unpacklo_epi8(a[i], a[i + 1]);
    b[i + 1] = _mm256_unpackhi_epi8(a[i], a[i + 1]);
  }
  for (int j = 0; j < 16; j += 4) {
    c[j] = _mm256_unpacklo_epi16(b[j], b[j + 2]);
    c[j + 1] = _mm256_unpackhi_epi16(b[j], b[j + 2]);
    c[j + 2] = _mm256_unpacklo_epi16(b[j + 1], b[j + 3]);
    c[j + 3] = _mm256_unpackhi_epi16(b[j + 1], b[j + 3]);
  }
  for (int k = 0; k < 16; k += 8)
    for (int m = 0; m < 4; ++m) {
      d[k + 2 * m] = _mm256_unpacklo_epi32(c[k + m], c[k + 4 + m]);
      d[k + 2 * m + 1] = _mm256_unpackhi_epi32(c[k + m], c[k + 4 + m]);
    }
  for (int t = 0; t < 8; ++t) {
    const __m256i even = _mm256_unpacklo_epi64(d[t], d[8 + t]), odd = _mm256_unpackhi_epi64(d[t], d[8 + t]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * t) * dst_stride), _mm256_castsi256_si128(even));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * t + 1) * dst_stride), _mm256_castsi256_si128(odd));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (16 + 2 * t) * dst_stride), _mm256_extracti128_si256(even, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (16 + 2 * t + 1) * dst_stride), _mm256_extracti128_si256(odd, 1));
  }
}

BALLAST_SIMD inline void block4x4_u64(const std::uint64_t* src, std::uint64_t src_stride, std::uint64_t* dst,
                                      std::uint64_t dst_stride) {
  __m256d a[4];
  for (int i = 0; i < 4; ++i) a[i] = _mm256_loadu_pd(reinterpret_cast<const double*>(src + i * src_stride));
  const __m256d t0 = _mm256_unpacklo_pd(a[0], a[1]), t1 = _mm256_unpackhi_pd(a[0], a[1]);
  const __m256d t2 = _mm256_unpacklo_pd(a[2], a[3]), t3 = _mm256_unpackhi_pd(a[2], a[3]);
  _mm256_storeu_pd(reinterpret_cast<double*>(dst), _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(reinterpret_cast<double*>(dst + dst_stride), _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(reinterpret_cast<double*>(dst + 2 * dst_stride), _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(reinterpret_cast<double*>(dst + 3 * dst_stride), _mm256_permute2f128_pd(t1, t3, 0x31));
}

// 64 bytes, unaligned on either side.
// Output stores. `stream` is set for outputs of kStreamBytes or more
// (kernels.hpp: they go past the cache, as the C library's memcpy writes a
// copy of that size, without a read of each line first); a store whose
// address is not aligned for it, at an edge or in an unaligned output,
// stays a plain one, so the bytes written are the same either way. A
// kernel that streamed ends with done_streaming(): non-temporal stores are
// weakly ordered, and the fence makes them visible before the thread
// reports its part done.
BALLAST_SIMD inline void put32(void* p, __m256i v, bool stream) {
  if (stream && (reinterpret_cast<std::uintptr_t>(p) & 31) == 0) {
    _mm256_stream_si256(static_cast<__m256i*>(p), v);
  } else {
    _mm256_storeu_si256(static_cast<__m256i*>(p), v);
  }
}
BALLAST_SIMD inline void put16(void* p, __m128i v, bool stream) {
  if (stream && (reinterpret_cast<std::uintptr_t>(p) & 15) == 0) {
    _mm_stream_si128(static_cast<__m128i*>(p), v);
  } else {
    _mm_storeu_si128(static_cast<__m128i*>(p), v);
  }
}
BALLAST_SIMD inline void done_streaming(bool stream) {
  if (stream) _mm_sfence();
}

BALLAST_SIMD inline void store_line(void* dst, const void* src, bool stream) {
  const __m256i a = _mm256_loadu_si256(static_cast<const __m256i*>(src));
  const __m256i b = _mm256_loadu_si256(static_cast<const __m256i*>(src) + 1);
  put32(dst, a, stream);
  put32(static_cast<__m256i*>(dst) + 1, b, stream);
}

// The side of a transpose's super-tile, in elements of `element_bytes`: the
// largest power of two S whose S x S source tile and S x S destination
// tile (2 S^2 bytes of elements) fit in this core's L2, between 64 and
// 1024. A 512 KiB L2 gives 256 for f32 and f16, the sizes first tuned by
// hand on such a machine; a 2 MiB L2 gives 512. Unknown L2: 512 KiB.
std::uint64_t super_tile(unsigned element_bytes) {
  static const std::uint64_t l2 = [] {
    const std::uint64_t b = cache_bytes(2);
    return b != 0 ? b : std::uint64_t{512} << 10;
  }();
  std::uint64_t s = 64;
  while (s < 1024 && 2 * (2 * s) * (2 * s) * element_bytes <= l2) s *= 2;
  return s;
}

// The walk every transpose shares. Super-tiles of kSuper x kSuper
// elements (Blocks::super_side(): L2's reach for blocks that re-read
// their lines, longer runs for those that do not) bound the pages and
// lines in flight; inside one, blocks of L columns (L = one 64-byte line
// of elements) by h = 2L rows (L for bytes, see R below), or L where fewer are left, go to
// Blocks::full, which writes each of the block's L destination rows as h
// elements: whole lines. Working on the matrices element by element would
// touch each line a few bytes at a time while dozens of others (a
// power-of-two stride apart, so in the same cache set) compete for it.
// Two lines per destination row, not one, is what takes a transpose past
// the cache to half the streamed copy's speed: measured here (2-core AMD
// EPYC, f32 65280x4096), one line per row wrote 20-21 GB/s and two 34-37,
// as adjacent lines go to memory together. The next block's source lines
// are prefetched as this one is transposed (27.8 to 33.5 GB/s in the same
// measurement): the hardware's prefetchers do not follow 2L streams a row
// apart. Rows left over (fewer than L at the bottom of a super-tile) and
// columns that do not fill a block move one element at a time.
// No target of its own: it is inlined into each table's transpose_cols.
template <class T, class Blocks>
[[gnu::always_inline]] inline void transpose_walk(const void* src_bytes, void* dst_bytes, std::uint64_t rows,
                                                  std::uint64_t cols, std::uint64_t col_begin, std::uint64_t col_end) {
  constexpr std::uint64_t L = 64 / sizeof(T);
  // A full block's rows: 2L, but for bytes L. A block reads one line from
  // each of its rows, and 128 streams at once were more than the Intel
  // Xeon of docs/benchmarks.md keeps in flight: its byte transpose moved
  // 19.2-19.7 GB/s past the cache with 128-row blocks and 27.0-27.3 with
  // 64 (AVX-512; the AVX2 blocks 18.1-18.2 and 19.1-23.9). f32 and f16
  // were faster with 2L (37.5-38.1 and 28.6-29.0 against 32.9-34.3 and
  // 26.0-26.2 with L).
  constexpr std::uint64_t R = sizeof(T) == 1 ? L : 2 * L;
  const std::uint64_t kSuper = Blocks::super_side();  // a multiple of R
  const T* src = static_cast<const T*>(src_bytes);
  T* dst = static_cast<T*>(dst_bytes);
  const bool stream = rows * cols * sizeof(T) >= kStreamBytes;
  for (std::uint64_t sc = col_begin; sc < col_end; sc += kSuper) {
    const std::uint64_t sc1 = std::min(col_end, sc + kSuper);
    for (std::uint64_t sr = 0; sr < rows; sr += kSuper) {
      const std::uint64_t sr1 = std::min(rows, sr + kSuper);
      for (std::uint64_t r0 = sr; r0 < sr1;) {
        // R rows where they are left, else L, else the rest one by one.
        const std::uint64_t left = sr1 - r0;
        const std::uint64_t h = left >= R ? R : left >= L ? L : left;
        for (std::uint64_t c0 = sc; c0 < sc1; c0 += L) {
          const std::uint64_t c1 = std::min(sc1, c0 + L);
          if (c1 - c0 == L && h >= L) {
            if (c0 + 2 * L <= sc1)
              for (std::uint64_t i = 0; i < h; ++i)
                _mm_prefetch(reinterpret_cast<const char*>(src + (r0 + i) * cols + c0 + L), _MM_HINT_T0);
            Blocks::full(src + r0 * cols + c0, cols, dst + c0 * rows + r0, rows, h, stream);
          } else {
            for (std::uint64_t c = c0; c < c1; ++c)
              for (std::uint64_t r = r0; r < r0 + h; ++r) dst[c * rows + r] = src[r * cols + c];
          }
        }
        r0 += h;
      }
    }
  }
  if (stream) _mm_sfence();  // done_streaming(), which this untargeted walk cannot inline
}

// One block for the AVX2 table: its source lines read whole (into a
// contiguous buffer where B > 8), transposed by B x BC register blocks
// into a second buffer, and written out as L destination rows of h
// elements. The staged copies stay plain stores (they are read back at
// once); only the destination lines stream.
template <class T, std::uint64_t B, std::uint64_t BC, void (*Block)(const T*, std::uint64_t, T*, std::uint64_t)>
struct StagedBlocks {
  static std::uint64_t super_side() { return std::max<std::uint64_t>(super_tile(sizeof(T)), 128 / sizeof(T)); }
  BALLAST_SIMD static void full(const T* src, std::uint64_t cols, T* dst, std::uint64_t rows, std::uint64_t h,
                                bool stream) {
    constexpr std::uint64_t L = 64 / sizeof(T);
    constexpr std::uint64_t R = 2 * L;
    // A block of B rows reads B source lines at once; more than 8 of them a
    // power-of-two stride apart would not fit in one set of an 8-way L1, so
    // those are first copied to a contiguous buffer.
    constexpr bool kStage = B > 8;
    alignas(64) T staged[kStage ? R * L : 1];  // the source block, rows contiguous
    alignas(64) T buffer[L * R];               // its transpose: L rows of h elements
    if constexpr (kStage) {
      for (std::uint64_t i = 0; i < h; ++i) store_line(staged + i * L, src + i * cols, false);
      for (std::uint64_t rg = 0; rg < h; rg += B)
        for (std::uint64_t cg = 0; cg < L; cg += BC) Block(staged + rg * L + cg, L, buffer + cg * h + rg, h);
    } else {
      for (std::uint64_t rg = 0; rg < h; rg += B)
        for (std::uint64_t cg = 0; cg < L; cg += BC) Block(src + rg * cols + cg, cols, buffer + cg * h + rg, h);
    }
    for (std::uint64_t j = 0; j < L; ++j)
      for (std::uint64_t k = 0; k < h; k += L) store_line(dst + j * rows + k, buffer + j * h + k, stream);
  }
};

BALLAST_SIMD void transpose_cols(const void* src, void* dst, std::uint64_t rows, std::uint64_t cols,
                                 unsigned element_bytes, std::uint64_t c0, std::uint64_t c1) {
  using std::uint16_t, std::uint32_t, std::uint64_t, std::uint8_t;
  switch (element_bytes) {
    case 1: return transpose_walk<uint8_t, StagedBlocks<uint8_t, 16, 32, block16x32_u8>>(src, dst, rows, cols, c0, c1);
    case 2: return transpose_walk<uint16_t, StagedBlocks<uint16_t, 8, 16, block8x16_u16>>(src, dst, rows, cols, c0, c1);
    case 4: return transpose_walk<uint32_t, StagedBlocks<uint32_t, 8, 8, block8x8_u32>>(src, dst, rows, cols, c0, c1);
    case 8: return transpose_walk<uint64_t, StagedBlocks<uint64_t, 4, 4, block4x4_u64>>(src, dst, rows, cols, c0, c1);
  }
}

// ------------------------------------------------ byte transpose, AVX-512
// The AVX2 byte transpose above spends 64 unpacks, 16 extracts and 32
// half-register stores on every 512 bytes, plus a staged copy of the
// source: it ran at 15-19 GB/s past the cache here, against 30-40 for the
// wider elements. This one works on whole 64-byte lines in two passes of
// 512-bit unpacks and shuffles (768 per 8 KiB block, every load and store
// a line, no staging): AVX-512 F and BW only, which every AVX-512 CPU has.

#define BALLAST_SIMD512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))

// 8 source rows of 64 bytes to 64 columns of 8 bytes. Interleaving bytes,
// then pairs, then quads of rows (three unpack steps within each 128-bit
// lane) leaves in out[m] the columns 16l + 2m and 16l + 2m + 1 of lane l,
// as its qwords 2l and 2l + 1 (each the 8 rows of one column).
BALLAST_SIMD512 inline void columns8x64_u8(const std::uint8_t* src, std::uint64_t stride, __m512i* out) {
  __m512i a[8], b[8], c[8];
  for (int i = 0; i < 8; ++i) a[i] = _mm512_loadu_si512(src + i * stride);
  for (int i = 0; i < 8; i += 2) {
    b[i] = _mm512_unpacklo_epi8(a[i], a[i + 1]);  // columns 0-7 of each lane, rows i and i + 1
    b[i + 1] = _mm512_unpackhi_epi8(a[i], a[i + 1]);  // columns 8-15
  }
  for (int j = 0; j < 8; j += 4) {  // rows j to j + 3, columns 0-3, 4-7, 8-11 and 12-15 of each lane
    c[j] = _mm512_unpacklo_epi16(b[j], b[j + 2]);
    c[j + 1] = _mm512_unpackhi_epi16(b[j], b[j + 2]);
    c[j + 2] = _mm512_unpacklo_epi16(b[j + 1], b[j + 3]);
    c[j + 3] = _mm512_unpackhi_epi16(b[j + 1], b[j + 3]);
  }
  for (int m = 0; m < 4; ++m) {  // all 8 rows of columns 4m, 4m + 1 (even) and 4m + 2, 4m + 3 (odd)
    out[2 * m] = _mm512_unpacklo_epi32(c[m], c[m + 4]);
    out[2 * m + 1] = _mm512_unpackhi_epi32(c[m], c[m + 4]);
  }
}

// The transpose of 8 registers as an 8x8 matrix of qwords: y[q] holds
// qword q of x[0], ..., x[7]. Pairs within each lane, then lanes gathered
// by two shuffles of 128-bit lanes.
BALLAST_SIMD512 inline void transpose8x8_u64(const __m512i* x, __m512i* y) {
  __m512i t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi64(x[i], x[i + 1]);  // lane l: qword 2l of x[i], x[i + 1]
    t[i + 1] = _mm512_unpackhi_epi64(x[i], x[i + 1]);  // lane l: qword 2l + 1
  }
  for (int e = 0; e < 2; ++e) {
    const __m512i u0 = _mm512_shuffle_i64x2(t[e], t[2 + e], _MM_SHUFFLE(2, 0, 2, 0));  // lanes 0, 2
    const __m512i u1 = _mm512_shuffle_i64x2(t[e], t[2 + e], _MM_SHUFFLE(3, 1, 3, 1));  // lanes 1, 3
    const __m512i u2 = _mm512_shuffle_i64x2(t[4 + e], t[6 + e], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i u3 = _mm512_shuffle_i64x2(t[4 + e], t[6 + e], _MM_SHUFFLE(3, 1, 3, 1));
    y[0 + e] = _mm512_shuffle_i64x2(u0, u2, _MM_SHUFFLE(2, 0, 2, 0));
    y[4 + e] = _mm512_shuffle_i64x2(u0, u2, _MM_SHUFFLE(3, 1, 3, 1));
    y[2 + e] = _mm512_shuffle_i64x2(u1, u3, _MM_SHUFFLE(2, 0, 2, 0));
    y[6 + e] = _mm512_shuffle_i64x2(u1, u3, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

BALLAST_SIMD512 inline void put64(void* p, __m512i v, bool stream) {
  if (stream && (reinterpret_cast<std::uintptr_t>(p) & 63) == 0) {
    _mm512_stream_si512(static_cast<__m512i*>(p), v);
  } else {
    _mm512_storeu_si512(p, v);
  }
}

// One block of 64 rows by 64 columns (the walk's full byte block, see R
// there). First pass: each group of 8 rows becomes 8 registers of column
// pieces (columns8x64_u8). Second pass: for each of those 8 register
// slots, the pieces of the 8 groups are one 8x8 qword transpose away from
// 8 whole destination lines.
struct ByteBlocks512 {
  // Nothing here is read twice (each source line is one load, each
  // destination line one store), so the super-tile need not fit in L2: its
  // side only sets how long a run of each row the walk reads and writes
  // before it moves on. 1024 moved 26-28 GB/s past the cache here against
  // 22-24 for L2's 512 (2-core AMD EPYC, 130560x8192, bench_derive).
  static std::uint64_t super_side() { return 1024; }
  BALLAST_SIMD512 static void full(const std::uint8_t* src, std::uint64_t cols, std::uint8_t* dst, std::uint64_t rows,
                                   std::uint64_t /*h: always 64*/, bool stream) {
    __m512i pieces[8][8];  // [group of 8 rows][slot m]
    for (std::uint64_t g = 0; g < 8; ++g) columns8x64_u8(src + 8 * g * cols, cols, pieces[g]);
    for (int m = 0; m < 8; ++m) {
      __m512i x[8], y[8];
      for (int g = 0; g < 8; ++g) x[g] = pieces[g][m];
      transpose8x8_u64(x, y);
      // y[q], q = 2l + e: the column 16l + 2m + e (out of 8 registers m).
      for (int q = 0; q < 8; ++q) put64(dst + (16 * (q >> 1) + 2 * m + (q & 1)) * rows, y[q], stream);
    }
  }
};

// The AVX-512 table's transposes: its own byte blocks, the AVX2 blocks
// for wider elements (already at the streamed copy's half).
BALLAST_SIMD512 void transpose_cols512(const void* src, void* dst, std::uint64_t rows, std::uint64_t cols,
                                       unsigned element_bytes, std::uint64_t col_begin, std::uint64_t col_end) {
  if (element_bytes == 1)
    return transpose_walk<std::uint8_t, ByteBlocks512>(src, dst, rows, cols, col_begin, col_end);
  transpose_cols(src, dst, rows, cols, element_bytes, col_begin, col_end);
}


// memcpy, or with `stream` 128 bytes at a time through non-temporal stores
// from the first 32-byte aligned destination byte (the head and the tail by
// memcpy).
BALLAST_SIMD void copy(void* dst_bytes, const void* src_bytes, std::uint64_t bytes, bool stream) {
  auto* d = static_cast<std::uint8_t*>(dst_bytes);
  const auto* s = static_cast<const std::uint8_t*>(src_bytes);
  if (!stream || bytes < 256) {
    std::memcpy(d, s, bytes);
    return;
  }
  const std::uint64_t head = (32 - (reinterpret_cast<std::uintptr_t>(d) & 31)) & 31;
  std::memcpy(d, s, head);
  std::uint64_t i = head;
  for (; i + 128 <= bytes; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();
}

// The same with 64-byte registers: every non-temporal store a whole line.
// On the Intel Xeon of docs/benchmarks.md it streams 17% more than the
// AVX2 loop above (two 32-byte stores per line), 20.2 GB/s against 17.3
// on two threads, and that faster copy is both the page-in path and the
// anchor bench_derive measures the kernels against.
BALLAST_SIMD512 void copy512(void* dst_bytes, const void* src_bytes, std::uint64_t bytes, bool stream) {
  auto* d = static_cast<std::uint8_t*>(dst_bytes);
  const auto* s = static_cast<const std::uint8_t*>(src_bytes);
  if (!stream || bytes < 512) {
    std::memcpy(d, s, bytes);
    return;
  }
  const std::uint64_t head = (64 - (reinterpret_cast<std::uintptr_t>(d) & 63)) & 63;
  std::memcpy(d, s, head);
  std::uint64_t i = head;
  for (; i + 256 <= bytes; i += 256) {
    const __m512i a = _mm512_loadu_si512(s + i);
    const __m512i b = _mm512_loadu_si512(s + i + 64);
    const __m512i c = _mm512_loadu_si512(s + i + 128);
    const __m512i e = _mm512_loadu_si512(s + i + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i + 192), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();
}

BALLAST_SIMD void to_f16_from_f32(const float* src, std::uint16_t* dst, std::uint64_t count, bool stream) {
  std::uint64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + 8);
    const __m256 c = _mm256_loadu_ps(src + i + 16), d = _mm256_loadu_ps(src + i + 24);
    put16(dst + i, _mm256_cvtps_ph(a, kRne), stream);
    put16(dst + i + 8, _mm256_cvtps_ph(b, kRne), stream);
    put16(dst + i + 16, _mm256_cvtps_ph(c, kRne), stream);
    put16(dst + i + 24, _mm256_cvtps_ph(d, kRne), stream);
  }
  for (; i + 8 <= count; i += 8) put16(dst + i, _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRne), stream);
  done_streaming(stream);
  for (; i < count; ++i) dst[i] = kmath::f16_bits_from_f32(src[i]);
}

// bf16 is the top half of an f32: widen, shift, convert.
BALLAST_SIMD inline __m128i bf16x8_to_f16x8(const std::uint16_t* src) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m256i f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16);
  return _mm256_cvtps_ph(_mm256_castsi256_ps(f), kRne);
}

BALLAST_SIMD void to_f16_from_bf16(const std::uint16_t* src, std::uint16_t* dst, std::uint64_t count, bool stream) {
  std::uint64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m128i a = bf16x8_to_f16x8(src + i), b = bf16x8_to_f16x8(src + i + 8);
    const __m128i c = bf16x8_to_f16x8(src + i + 16), d = bf16x8_to_f16x8(src + i + 24);
    put16(dst + i, a, stream);
    put16(dst + i + 8, b, stream);
    put16(dst + i + 16, c, stream);
    put16(dst + i + 24, d, stream);
  }
  for (; i + 8 <= count; i += 8) put16(dst + i, bf16x8_to_f16x8(src + i), stream);
  done_streaming(stream);
  for (; i < count; ++i) dst[i] = kmath::f16_bits_from_bf16_bits(src[i]);
}

// ---------------------------------------------------------------- int4
// Eight consecutive blocks' scales or zero points of row n, as f32.
BALLAST_SIMD inline __m256 int4_scales8(const Int4Args& a, std::uint64_t n, std::uint64_t block) {
  const std::uint64_t i = n * a.k_blocks + block;
  if (a.f16_scales)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(a.scales) + i)));
  return _mm256_loadu_ps(static_cast<const float*>(a.scales) + i);
}

BALLAST_SIMD inline __m256 int4_zero_points8(const Int4Args& a, std::uint64_t n, std::uint64_t block) {
  if (a.zero_point_form == ZeroPoints::absent) return _mm256_set1_ps(kmath::kDefaultZeroPoint);
  if (a.zero_point_form == ZeroPoints::unpacked) {
    const std::uint64_t i = n * a.k_blocks + block;
    if (a.f16_scales)
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(a.zero_points) + i)));
    return _mm256_loadu_ps(static_cast<const float*>(a.zero_points) + i);
  }
  // Packed: eight nibbles in four bytes (block is a multiple of 8, so they
  // start on a byte and stay inside the row).
  std::uint32_t v;
  std::memcpy(&v, static_cast<const std::uint8_t*>(a.zero_points) + n * ((a.k_blocks + 1) / 2) + block / 2, 4);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(v)), shifts),
                                         _mm256_set1_epi32(0xf));
  return _mm256_cvtepi32_ps(codes);
}

// A block's 16 possible results (q - zp) * scale as f16, split into a table
// of low bytes and one of high bytes so that pshufb looks codes up 16 at a
// time. `s` and `z` hold the block's scale and zero point in every lane.
struct BlockTables {
  __m128i lo, hi;
};

BALLAST_SIMD inline BlockTables block_tables(__m256 s, __m256 z) {
  const __m256 q_low = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 q_high = _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15);
  const __m128i even_bytes = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i odd_bytes = _mm_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m128i h0 = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_sub_ps(q_low, z), s), kRne);
  const __m128i h1 = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_sub_ps(q_high, z), s), kRne);
  return {_mm_unpacklo_epi64(_mm_shuffle_epi8(h0, even_bytes), _mm_shuffle_epi8(h1, even_bytes)),
          _mm_unpacklo_epi64(_mm_shuffle_epi8(h0, odd_bytes), _mm_shuffle_epi8(h1, odd_bytes))};
}

// 64 columns from 32 bytes: the low 16 bytes' codes are looked up in the
// low 128-bit lane of the tables, the high 16 bytes' in the high lane (the
// same block's tables twice, or two consecutive 32-column blocks').
BALLAST_SIMD inline void dequant_64(__m256i table_lo, __m256i table_hi, const std::uint8_t* bytes, std::uint16_t* o,
                                    bool stream) {
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes));
  const __m256i lo = _mm256_and_si256(v, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
  const __m256i i0 = _mm256_unpacklo_epi8(lo, hi), i1 = _mm256_unpackhi_epi8(lo, hi);  // columns 0-15 | 32-47, 16-31 | 48-63
  const __m256i l0 = _mm256_shuffle_epi8(table_lo, i0), g0 = _mm256_shuffle_epi8(table_hi, i0);
  const __m256i l1 = _mm256_shuffle_epi8(table_lo, i1), g1 = _mm256_shuffle_epi8(table_hi, i1);
  const __m256i a = _mm256_unpacklo_epi8(l0, g0), b = _mm256_unpackhi_epi8(l0, g0);  // 0-7 | 32-39, 8-15 | 40-47
  const __m256i c = _mm256_unpacklo_epi8(l1, g1), d = _mm256_unpackhi_epi8(l1, g1);  // 16-23 | 48-55, 24-31 | 56-63
  put32(o, _mm256_permute2x128_si256(a, b, 0x20), stream);
  put32(o + 16, _mm256_permute2x128_si256(c, d, 0x20), stream);
  put32(o + 32, _mm256_permute2x128_si256(a, b, 0x31), stream);
  put32(o + 48, _mm256_permute2x128_si256(c, d, 0x31), stream);
}

// One block of `cols` columns.
BALLAST_SIMD inline void dequant_block(__m256 s, __m256 z, const std::uint8_t* bytes, std::uint16_t* o,
                                       std::uint64_t cols, bool stream) {
  const BlockTables t = block_tables(s, z);
  const __m128i nibble = _mm_set1_epi8(0x0f);
  std::uint64_t c = 0;
  if (cols >= 64) {
    const __m256i table_lo = _mm256_broadcastsi128_si256(t.lo), table_hi = _mm256_broadcastsi128_si256(t.hi);
    for (; c + 64 <= cols; c += 64) dequant_64(table_lo, table_hi, bytes + c / 2, o + c, stream);
  }
  for (; c + 32 <= cols; c += 32) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + c / 2));
    const __m128i lo = _mm_and_si128(v, nibble), hi = _mm_and_si128(_mm_srli_epi16(v, 4), nibble);
    const __m128i i0 = _mm_unpacklo_epi8(lo, hi), i1 = _mm_unpackhi_epi8(lo, hi);  // column order
    const __m128i l0 = _mm_shuffle_epi8(t.lo, i0), g0 = _mm_shuffle_epi8(t.hi, i0);
    const __m128i l1 = _mm_shuffle_epi8(t.lo, i1), g1 = _mm_shuffle_epi8(t.hi, i1);
    put16(o + c, _mm_unpacklo_epi8(l0, g0), stream);
    put16(o + c + 8, _mm_unpackhi_epi8(l0, g0), stream);
    put16(o + c + 16, _mm_unpacklo_epi8(l1, g1), stream);
    put16(o + c + 24, _mm_unpackhi_epi8(l1, g1), stream);
  }
  for (; c + 16 <= cols; c += 16) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + c / 2));
    const __m128i lo = _mm_and_si128(v, nibble), hi = _mm_and_si128(_mm_srli_epi16(v, 4), nibble);
    const __m128i i0 = _mm_unpacklo_epi8(lo, hi);
    const __m128i l0 = _mm_shuffle_epi8(t.lo, i0), g0 = _mm_shuffle_epi8(t.hi, i0);
    put16(o + c, _mm_unpacklo_epi8(l0, g0), stream);
    put16(o + c + 8, _mm_unpackhi_epi8(l0, g0), stream);
  }
  const float scale = _mm256_cvtss_f32(s), zp = _mm256_cvtss_f32(z);
  for (; c < cols; ++c) o[c] = kmath::dequant_f16_bits(kmath::int4_code(bytes, c), zp, scale);
}

BALLAST_SIMD void dequant_int4_rows(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  const std::uint64_t block_bytes = a.block_size / 2;
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* row = a.b + n * int4_row_bytes(a);
    std::uint16_t* out = a.f16_out + n * a.k;
    auto cols_of = [&](std::uint64_t block) { return std::min<std::uint64_t>(a.block_size, a.k - block * a.block_size); };
    std::uint64_t block = 0;
    // Scales and zero points eight blocks at a time, each broadcast from
    // its lane in registers.
    for (; block + 8 <= a.k_blocks; block += 8) {
      const __m256 s8 = int4_scales8(a, n, block), z8 = int4_zero_points8(a, n, block);
      if (a.block_size == 32 && cols_of(block + 7) == 32) {
        // Two 32-column blocks per 256-bit step, one in each lane.
        for (int i = 0; i < 8; i += 2) {
          const BlockTables t0 = block_tables(_mm256_permutevar8x32_ps(s8, _mm256_set1_epi32(i)), _mm256_permutevar8x32_ps(z8, _mm256_set1_epi32(i)));
          const BlockTables t1 =
              block_tables(_mm256_permutevar8x32_ps(s8, _mm256_set1_epi32(i + 1)), _mm256_permutevar8x32_ps(z8, _mm256_set1_epi32(i + 1)));
          const std::uint64_t b = block + static_cast<std::uint64_t>(i);
          dequant_64(_mm256_set_m128i(t1.lo, t0.lo), _mm256_set_m128i(t1.hi, t0.hi), row + b * block_bytes,
                     out + b * a.block_size, a.stream);
        }
        continue;
      }
      for (int i = 0; i < 8; ++i) {
        const std::uint64_t b = block + static_cast<std::uint64_t>(i);
        dequant_block(_mm256_permutevar8x32_ps(s8, _mm256_set1_epi32(i)), _mm256_permutevar8x32_ps(z8, _mm256_set1_epi32(i)),
                      row + b * block_bytes, out + b * a.block_size, cols_of(b), a.stream);
      }
    }
    for (; block < a.k_blocks; ++block)
      dequant_block(_mm256_set1_ps(int4_scale(a, n, block)), _mm256_set1_ps(int4_zero_point(a, n, block)),
                    row + block * block_bytes, out + block * a.block_size, cols_of(block), a.stream);
  }
  done_streaming(a.stream);
}

// The steps of int4_repack_bytes on eight words at once.
BALLAST_SIMD inline __m256i repack_words8(__m256i v) {
  const __m256i nibbles = _mm256_set1_epi32(0x0f0f0f0f), bytes02 = _mm256_set1_epi32(0x00ff00ff);
  const __m256i low_half = _mm256_set1_epi32(0x0000ffff);
  __m256i even = _mm256_and_si256(v, nibbles);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(v, 4), nibbles);
  even = _mm256_and_si256(_mm256_or_si256(even, _mm256_srli_epi32(even, 4)), bytes02);
  odd = _mm256_and_si256(_mm256_or_si256(odd, _mm256_srli_epi32(odd, 4)), bytes02);
  even = _mm256_and_si256(_mm256_or_si256(even, _mm256_srli_epi32(even, 8)), low_half);
  odd = _mm256_and_si256(_mm256_or_si256(odd, _mm256_srli_epi32(odd, 8)), low_half);
  return _mm256_or_si256(even, _mm256_slli_epi32(odd, 16));
}

// Row n of a repack from word j on (the words eight at a time, the rest
// one by one, a partial last word), then its scale pairs.
BALLAST_SIMD void repack_int4_row_from(const Int4Args& a, std::uint64_t n, std::uint64_t j) {
  const std::uint64_t words = (a.k + 7) / 8, full_words = a.k / 8;
  const std::uint8_t* row = a.b + n * int4_row_bytes(a);
  std::uint32_t* out = a.words + n * words;
  for (; j + 8 <= full_words; j += 8)
    put32(out + j, repack_words8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 4 * j))), a.stream);
  for (; j < full_words; ++j) {
    std::uint32_t v;
    std::memcpy(&v, row + 4 * j, 4);
    out[j] = int4_repack_bytes(v);
  }
  if (full_words < words) out[full_words] = int4_partial_word(a, n, full_words);

  const __m256 sign = _mm256_set1_ps(-0.0f);
  std::uint8_t* pairs = a.pairs + 4 * n * a.k_blocks;
  std::uint64_t b = 0;
  for (; b + 8 <= a.k_blocks; b += 8) {
    const __m256 s = int4_scales8(a, n, b), z = int4_zero_points8(a, n, b);
    const __m128i hs = _mm256_cvtps_ph(s, kRne);
    const __m128i ho = _mm256_cvtps_ph(_mm256_xor_ps(_mm256_mul_ps(s, z), sign), kRne);  // -(s*z)
    put16(pairs + 4 * b, _mm_unpacklo_epi16(hs, ho), a.stream);
    put16(pairs + 4 * (b + 4), _mm_unpackhi_epi16(hs, ho), a.stream);
  }
  for (; b < a.k_blocks; ++b)
    store_pair(pairs, b, kmath::repack_scale_pair(int4_scale(a, n, b), int4_zero_point(a, n, b)));
}

BALLAST_SIMD void repack_int4_rows(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  for (std::uint64_t n = row_begin; n < row_end; ++n) repack_int4_row_from(a, n, 0);
  done_streaming(a.stream);
}

// ---------------------------------------------------------------- int8
template <bool F16>
BALLAST_SIMD inline __m256 load8(const void* src, std::uint64_t i) {
  if constexpr (F16)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(src) + i)));
  else return _mm256_loadu_ps(static_cast<const float*>(src) + i);
}

template <bool F16>
BALLAST_SIMD inline float load1(const void* src, std::uint64_t i) {
  if constexpr (F16) return kmath::f32_from_f16_bits(static_cast<const std::uint16_t*>(src)[i]);
  else return static_cast<const float*>(src)[i];
}

// For f16 the maximum is taken on the bits: with the sign cleared, f16
// patterns order like their values, and NaN patterns (above 0x7c00) are
// zeroed so they are ignored, as in kmath::abs_max_step.
BALLAST_SIMD inline __m256i f16_abs_max_step(__m256i m, const std::uint16_t* src) {
  const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)), _mm256_set1_epi16(0x7fff));
  return _mm256_max_epu16(m, _mm256_andnot_si256(_mm256_cmpgt_epi16(a, _mm256_set1_epi16(0x7c00)), a));
}

// The end of both f16 maxima (AVX2 and AVX-512): the largest of `n` lane
// maxima and of |src[i]| for the tail [i, k), NaN patterns left out, as f32.
inline float f16_abs_max_end(const std::uint16_t* lanes, std::uint64_t n, const std::uint16_t* src, std::uint64_t i,
                             std::uint64_t k) {
  std::uint16_t best = 0;
  for (std::uint64_t l = 0; l < n; ++l) best = lanes[l] > best ? lanes[l] : best;
  for (; i < k; ++i) {
    const std::uint16_t a = src[i] & 0x7fff;
    if (a <= 0x7c00 && a > best) best = a;
  }
  return kmath::f32_from_f16_bits(best);
}

// A running maximum of |w| over a row, 32 elements at a time, NaN left out
// as kmath::abs_max_step leaves it out: for f32 by maxps (which keeps the
// running value where the element is NaN), for f16 by f16_abs_max_step.
// (The compiler drops the accumulators the type does not use.)
template <bool F16>
struct RowMax {
  __m256 f32[4];
  __m256i f16[2];
};

template <bool F16>
BALLAST_SIMD inline void row_max_start(RowMax<F16>& m) {
  for (auto& v : m.f32) v = _mm256_setzero_ps();
  for (auto& v : m.f16) v = _mm256_setzero_si256();
}

template <bool F16>
BALLAST_SIMD inline void row_max_step(RowMax<F16>& m, const void* row, std::uint64_t i) {
  if constexpr (F16) {
    const auto* h = static_cast<const std::uint16_t*>(row) + i;
    m.f16[0] = f16_abs_max_step(m.f16[0], h);
    m.f16[1] = f16_abs_max_step(m.f16[1], h + 16);
  } else {
    const auto* w = static_cast<const float*>(row) + i;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int p = 0; p < 4; ++p) m.f32[p] = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(w + 8 * p), abs_mask), m.f32[p]);
  }
}

// The maximum, with elements [i, k) of the row taken one at a time.
template <bool F16>
BALLAST_SIMD inline float row_max_end(const RowMax<F16>& m, const void* row, std::uint64_t i, std::uint64_t k) {
  if constexpr (F16) {
    alignas(32) std::uint16_t lanes[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epu16(m.f16[0], m.f16[1]));
    return f16_abs_max_end(lanes, 16, static_cast<const std::uint16_t*>(row), i, k);
  } else {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(_mm256_max_ps(m.f32[0], m.f32[1]), _mm256_max_ps(m.f32[2], m.f32[3])));
    float r = 0.0f;
    for (float lane : lanes) r = kmath::abs_max_step(r, lane);
    for (; i < k; ++i) r = kmath::abs_max_step(r, static_cast<const float*>(row)[i]);
    return r;
  }
}

template <bool F16>
inline const void* row_at(const void* src, std::uint64_t base) {
  if constexpr (F16)
    return static_cast<const std::uint16_t*>(src) + base;
  else
    return static_cast<const float*>(src) + base;
}

template <bool F16>
BALLAST_SIMD float row_abs_max(const void* src, std::uint64_t base, std::uint64_t k) {
  const void* row = row_at<F16>(src, base);
  RowMax<F16> max;
  row_max_start(max);
  std::uint64_t i = 0;
  for (; i + 32 <= k; i += 32) row_max_step(max, row, i);
  return row_max_end(max, row, i, k);
}

// clamp(round_half_even(w / scale), -127, 127), NaN -> 0: kmath::quant_int8_code.
// With a normal, finite scale no quotient exceeds 127 * (1 + 2^-22) in
// magnitude, which rounds to at most 127, so the clamp can be skipped
// (kClamp false); a subnormal or infinite scale needs it.
template <bool kClamp>
BALLAST_SIMD inline __m256i codes8(__m256 w, __m256 scale) {
  __m256 r = _mm256_div_ps(w, scale);
  const __m256 nan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
  if constexpr (kClamp) r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  const __m256i i = _mm256_cvtps_epi32(_mm256_round_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  return _mm256_andnot_si256(_mm256_castps_si256(nan), i);
}

// Codes of elements i .. i + 31, as 32 bytes in order.
template <bool F16, bool kClamp>
BALLAST_SIMD inline __m256i codes32(const void* src, std::uint64_t i, __m256 scale) {
  const __m256i c0 = codes8<kClamp>(load8<F16>(src, i), scale);
  const __m256i c1 = codes8<kClamp>(load8<F16>(src, i + 8), scale);
  const __m256i c2 = codes8<kClamp>(load8<F16>(src, i + 16), scale);
  const __m256i c3 = codes8<kClamp>(load8<F16>(src, i + 24), scale);
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
  return _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// A row by the division with the clamp: rows with a given maximum, and
// those whose scale is subnormal or infinite (rows with their own normal
// scale take code_row_and_next_max).
template <bool F16>
BALLAST_SIMD void code_row(const void* src, std::uint64_t base, std::uint64_t k, float scale, std::int8_t* codes,
                           const char* next_row, bool stream) {
  const __m256 s = _mm256_set1_ps(scale);
  constexpr std::uint64_t kElementBytes = F16 ? 2 : 4;
  std::uint64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    if (next_row != nullptr)
      for (std::uint64_t line = 0; line < 32 * kElementBytes; line += 64)
        _mm_prefetch(next_row + i * kElementBytes + line, _MM_HINT_T0);
    put32(codes + i, codes32<F16, true>(src, base + i, s), stream);
  }
  for (; i < k; ++i) codes[i] = kmath::quant_int8_code(load1<F16>(src, base + i), scale);
}

// A row by the division (its own normal scale: no clamp) while the next
// row's maximum is taken in the same loop, its source prefetched into L2
// 8 KiB ahead: the AVX2 form of code_row512_and_next_max, which says why.
// On the AMD EPYC of docs/benchmarks.md (`cpu?simd=avx2`, seven alternating
// pairs) f32 rows went from 0.51-0.74 of the copy (L1, 2 KiB ahead) to
// 0.74-0.83, 0.92-1.00 of their traffic's stream; f16 rows ahead in five.
// Returns that maximum (0 without a next row).
template <bool F16>
BALLAST_SIMD float code_row_and_next_max(const void* src, std::uint64_t base, std::uint64_t k, float scale,
                                         std::int8_t* codes, const void* next, bool stream) {
  const __m256 s = _mm256_set1_ps(scale);
  constexpr std::uint64_t kElementBytes = F16 ? 2 : 4;
  RowMax<F16> max;
  row_max_start(max);
  std::uint64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    if (next != nullptr) {
      for (std::uint64_t line = 0; line < 32 * kElementBytes; line += 64)
        _mm_prefetch(static_cast<const char*>(next) + i * kElementBytes + 8192 + line, _MM_HINT_T1);
      row_max_step(max, next, i);
    }
    put32(codes + i, codes32<F16, false>(src, base + i, s), stream);
  }
  const std::uint64_t whole = i;
  for (; i < k; ++i) codes[i] = kmath::quant_int8_code(load1<F16>(src, base + i), scale);
  return next != nullptr ? row_max_end(max, next, whole, k) : 0.0f;
}

// The AVX-512 dequant_int4, for block sizes that are multiples of 32: a
// block's 16 possible results (q - zp) * scale, computed by the AVX2
// form's operations and rounded by F16C, are a table of 16 f16 words that
// vpermw indexes with 32 codes at a time, one 64-byte output line per
// lookup (the GGUF decoders' scheme). A last block cut short by K, and
// other block sizes, take the AVX2 form.
template <bool Stream>
BALLAST_SIMD512 inline void dequant_line(__m512i table, const std::uint8_t* bytes, std::uint16_t* o) {
  const __m128i nibble = _mm_set1_epi8(0x0f);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes));
  const __m128i lo = _mm_and_si128(v, nibble), hi = _mm_and_si128(_mm_srli_epi16(v, 4), nibble);
  // column order: byte j holds columns 2j (low nibble) and 2j + 1
  const __m256i codes = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
  const __m512i line = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(codes), table);
  if constexpr (Stream) {  // two halves: a streamed output is 32-byte aligned (dequant_int4_rows512 checks)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(o), _mm512_castsi512_si256(line));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(o + 16), _mm512_extracti64x4_epi64(line, 1));
  } else {
    _mm512_storeu_si512(o, line);
  }
}

// A block's table: (q - zp) * scale for q = 0..15, rounded to f16 (the
// AVX2 form's block_tables operations); `scale` and `zp` in every lane.
BALLAST_SIMD512 inline __m512i int4_table512(__m512 scale, __m512 zp) {
  const __m512 q = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_castsi256_si512(_mm512_cvtps_ph(_mm512_mul_ps(_mm512_sub_ps(q, zp), scale), kRne));
}

// Block b of a row (its bytes at `row`, its output at `out`); `scale` and
// `zp` hold the block's in every lane.
template <bool Stream>
BALLAST_SIMD512 inline void dequant_block512(const Int4Args& a, const std::uint8_t* row, std::uint16_t* out,
                                             std::uint64_t b, __m512 scale, __m512 zp) {
  const std::uint8_t* bytes = row + b * (a.block_size / 2);
  std::uint16_t* o = out + b * a.block_size;
  const std::uint64_t cols = std::min<std::uint64_t>(a.block_size, a.k - b * a.block_size);
  if (cols != a.block_size)
    return dequant_block(_mm512_castps512_ps256(scale), _mm512_castps512_ps256(zp), bytes, o, cols, Stream);
  const __m512i table = int4_table512(scale, zp);
  for (std::uint64_t c = 0; c < cols; c += 32) dequant_line<Stream>(table, bytes + c / 2, o + c);
}

template <bool Stream>
BALLAST_SIMD512 void dequant_int4_rows512_as(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  const std::uint64_t block_bytes = a.block_size / 2, full_blocks = a.k / a.block_size;
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* row = a.b + n * int4_row_bytes(a);
    std::uint16_t* out = a.f16_out + n * a.k;
    std::uint64_t block = 0;
    // Eight whole blocks at a time, their scales and zero points read as the
    // AVX2 form reads them and broadcast from their lanes in registers.
    const std::uint8_t* bytes = row;
    std::uint16_t* o = out;
    for (; block + 8 <= full_blocks; block += 8) {
      const __m512 s8 = _mm512_castps256_ps512(int4_scales8(a, n, block));
      const __m512 z8 = _mm512_castps256_ps512(int4_zero_points8(a, n, block));
      for (int i = 0; i < 8; ++i, bytes += block_bytes, o += a.block_size) {
        const __m512i lane = _mm512_set1_epi32(i);
        const __m512i table = int4_table512(_mm512_permutexvar_ps(lane, s8), _mm512_permutexvar_ps(lane, z8));
        for (std::uint64_t c = 0; c < a.block_size; c += 32) dequant_line<Stream>(table, bytes + c / 2, o + c);
      }
    }
    for (; block < a.k_blocks; ++block)
      dequant_block512<Stream>(a, row, out, block, _mm512_set1_ps(int4_scale(a, n, block)),
                               _mm512_set1_ps(int4_zero_point(a, n, block)));
  }
  if constexpr (Stream) _mm_sfence();
}

void dequant_int4_rows512(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  if (a.block_size % 32 != 0) return dequant_int4_rows(a, row_begin, row_end);
  // Every block's output starts a multiple of 64 bytes after the row's, and
  // every row's a multiple of 64 after the first when K is a multiple of 32;
  // otherwise (or at an unaligned base) the lines are stored plainly.
  const bool stream = a.stream && reinterpret_cast<std::uintptr_t>(a.f16_out) % 32 == 0 && a.k % 32 == 0;
  if (stream)
    dequant_int4_rows512_as<true>(a, row_begin, row_end);
  else
    dequant_int4_rows512_as<false>(a, row_begin, row_end);
}

// The AVX-512 form: sixteen words (one 64-byte line) at a time by the
// same steps, then the AVX2 form for the rest of the row and its pairs.
// On the Xeon of docs/benchmarks.md (paired runs past the cache) it moves
// 28.9-31.0 GB/s where the AVX2 form moved 26.2-27.9: the stores of
// whole lines, as in copy512. (Two repack_words8 halves stored as one
// line measured 27.5-28.8: the 512-bit steps are worth their copy.)
// The source is prefetched 2 KiB ahead (into the next row at a row's end):
// past the cache, on the Xeon of docs/benchmarks.md with a 4 MiB L2, the
// hardware prefetcher alone held this loop to 21-25 GB/s (0.65-0.72 of the
// line copy), and 2 KiB ahead gave 25.7-36.0 (0.75-0.99); 512 B and 4 KiB
// ahead were between.
BALLAST_SIMD512 void repack_int4_rows512(const Int4Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  const __m512i nibbles = _mm512_set1_epi32(0x0f0f0f0f), bytes02 = _mm512_set1_epi32(0x00ff00ff);
  const __m512i low_half = _mm512_set1_epi32(0x0000ffff);
  const std::uint64_t words = (a.k + 7) / 8, full_words = a.k / 8;
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint8_t* row = a.b + n * int4_row_bytes(a);
    std::uint32_t* out = a.words + n * words;
    std::uint64_t j = 0;
    for (; j + 16 <= full_words; j += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(row + 4 * j) + 2048, _MM_HINT_T0);
      const __m512i v = _mm512_loadu_si512(row + 4 * j);
      __m512i even = _mm512_and_si512(v, nibbles);
      __m512i odd = _mm512_and_si512(_mm512_srli_epi32(v, 4), nibbles);
      even = _mm512_and_si512(_mm512_or_si512(even, _mm512_srli_epi32(even, 4)), bytes02);
      odd = _mm512_and_si512(_mm512_or_si512(odd, _mm512_srli_epi32(odd, 4)), bytes02);
      even = _mm512_and_si512(_mm512_or_si512(even, _mm512_srli_epi32(even, 8)), low_half);
      odd = _mm512_and_si512(_mm512_or_si512(odd, _mm512_srli_epi32(odd, 8)), low_half);
      put64(out + j, _mm512_or_si512(even, _mm512_slli_epi32(odd, 16)), a.stream);
    }
    repack_int4_row_from(a, n, j);
  }
  if (a.stream) _mm_sfence();
}

// to_f16 in AVX-512: 32 values, one 64-byte output line, per step, from
// the first line-aligned output element on (the head and tail by the
// scalar rounding), so streamed outputs are whole-line non-temporal stores
// as in copy512. vcvtps2ph rounds as F16C's 256-bit form does: the same
// bits. From::sixteen(i) gives values i..i+15 as f32, From::one(i) value i
// as f16. The source is prefetched 2 KiB ahead, as in repack_int4_rows512:
// past the cache on the second Xeon of the benchmarks, bf16 went from
// 0.73-0.78 of the line copy to 0.92-0.97 (f32 0.75-0.91 to 0.85).
template <typename From>
BALLAST_SIMD512 inline void to_f16_lines(From from, std::uint16_t* dst, std::uint64_t count, bool stream) {
  const std::uint64_t misaligned = reinterpret_cast<std::uintptr_t>(dst) % 64;
  const std::uint64_t head = std::min<std::uint64_t>(count, (64 - misaligned) % 64 / 2);
  std::uint64_t i = 0;
  for (; i < head; ++i) dst[i] = from.one(i);
  for (; i + 32 <= count; i += 32) {
    for (std::uint64_t line = 0; line < 32 * sizeof(*from.src); line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(from.src + i) + 2048 + line, _MM_HINT_T0);
    const __m256i lo = _mm512_cvtps_ph(from.sixteen(i), kRne), hi = _mm512_cvtps_ph(from.sixteen(i + 16), kRne);
    put64(dst + i, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), stream);
  }
  if (stream) _mm_sfence();
  for (; i < count; ++i) dst[i] = from.one(i);
}

struct FromF32 {
  const float* src;
  BALLAST_SIMD512 __m512 sixteen(std::uint64_t i) const { return _mm512_loadu_ps(src + i); }
  std::uint16_t one(std::uint64_t i) const { return kmath::f16_bits_from_f32(src[i]); }
};

struct FromBf16 {  // bf16 is the top half of an f32: widen, shift, convert
  const std::uint16_t* src;
  BALLAST_SIMD512 __m512 sixteen(std::uint64_t i) const {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
  }
  std::uint16_t one(std::uint64_t i) const { return kmath::f16_bits_from_bf16_bits(src[i]); }
};

BALLAST_SIMD512 void to_f16_from_f32_512(const float* src, std::uint16_t* dst, std::uint64_t count, bool stream) {
  to_f16_lines(FromF32{src}, dst, count, stream);
}

BALLAST_SIMD512 void to_f16_from_bf16_512(const std::uint16_t* src, std::uint16_t* dst, std::uint64_t count,
                                          bool stream) {
  to_f16_lines(FromBf16{src}, dst, count, stream);
}

// The row drivers of both forms. Untargeted: they only call the per-row
// functions, which carry their instruction set.
using AbsMaxFn = float (*)(const void* src, std::uint64_t base, std::uint64_t k);
using CodeRowFn = void (*)(const void* src, std::uint64_t base, std::uint64_t k, float scale, std::int8_t* codes,
                           const char* next_row, bool stream);
using CodeNextFn = float (*)(const void* src, std::uint64_t base, std::uint64_t k, float scale, std::int8_t* codes,
                             const void* next, bool stream);

// Rows with a given maximum: it may be below the row's own (a caller's
// value), so every quotient can pass 127 and every row takes the clamp.
template <bool F16, CodeRowFn CodeClamped>
void quant_int8_rows_given_max(const Quant8Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint64_t base = n * a.k;
    const float scale = kmath::quant_int8_scale(kmath::given_row_max(a.given_max[n]));
    a.scales[n] = scale;
    std::int8_t* codes = a.codes + base;
    if (scale == 0.0f) {
      // K = 0 (N zero scales, no codes): the codes operand is empty and may
      // be null, which memset must not see even for 0 bytes.
      if (a.k != 0) std::memset(codes, 0, a.k);
      continue;
    }
    // While this row is coded, pull the next row in.
    const char* next_row =
        n + 1 < row_end ? static_cast<const char*>(a.src) + (base + a.k) * (F16 ? 2 : 4) : nullptr;
    CodeClamped(a.src, base, a.k, scale, codes, next_row, a.stream);
  }
  if (a.stream) _mm_sfence();  // done_streaming(), which this untargeted driver cannot inline
}

// Rows with their own maxima: each row's maximum comes from the loop that
// coded the row before it (CodeNext), but for the first row, rows after a
// zero scale and rows coded with the clamp, which take a maximum pass. With
// a normal, finite scale no quotient exceeds 127 * (1 + 2^-22) in magnitude,
// which rounds to at most 127, so CodeNext skips the clamp; a subnormal or
// infinite scale needs it. A normal scale is at most FLT_MAX * RN(1 / 127),
// below 2^122, so 1 / scale is normal too, as the AVX-512 multiply's bound
// needs. Past the cache on the second Xeon of docs/benchmarks.md, AVX-512
// against the two-pass driver in alternating runs: f32 0.56-0.74 of the copy
// (median 0.65) against 0.58-0.68 (0.61), f16 0.63-0.74 (0.69) against
// 0.60-0.71 (0.62).
template <bool F16, AbsMaxFn AbsMax, CodeNextFn CodeNext, CodeRowFn CodeClamped>
void quant_int8_rows_fused(const Quant8Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  constexpr std::uint64_t kElementBytes = F16 ? 2 : 4;
  const auto* src = static_cast<const char*>(a.src);
  float max = row_begin < row_end ? AbsMax(a.src, row_begin * a.k, a.k) : 0.0f;
  for (std::uint64_t n = row_begin; n < row_end; ++n) {
    const std::uint64_t base = n * a.k;
    const float scale = kmath::quant_int8_scale(max);
    a.scales[n] = scale;
    std::int8_t* codes = a.codes + base;
    const void* next = n + 1 < row_end ? src + (base + a.k) * kElementBytes : nullptr;
    if (scale >= 0x1p-126f && scale <= 0x1.fffffep127f) {
      max = CodeNext(a.src, base, a.k, scale, codes, next, a.stream);
      continue;
    }
    if (scale == 0.0f) {
      if (a.k != 0) std::memset(codes, 0, a.k);  // (K = 0: the codes operand may be null)
    } else {
      CodeClamped(a.src, base, a.k, scale, codes, nullptr, a.stream);
    }
    max = next != nullptr ? AbsMax(a.src, base + a.k, a.k) : 0.0f;
  }
  if (a.stream) _mm_sfence();
}

void quant_int8_rows(const Quant8Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  if (a.given_max != nullptr) {
    if (a.f16_src) return quant_int8_rows_given_max<true, code_row<true>>(a, row_begin, row_end);
    return quant_int8_rows_given_max<false, code_row<false>>(a, row_begin, row_end);
  }
  if (a.f16_src)
    return quant_int8_rows_fused<true, row_abs_max<true>, code_row_and_next_max<true>, code_row<true>>(a, row_begin,
                                                                                                       row_end);
  quant_int8_rows_fused<false, row_abs_max<false>, code_row_and_next_max<false>, code_row<false>>(a, row_begin,
                                                                                                  row_end);
}

// The AVX-512 form: sixteen lanes where AVX2 has eight, the same
// operations (a quotient rounded half to even, NaN to 0, the clamp where
// kClamp), so the same codes where it divides.
template <bool F16>
BALLAST_SIMD512 inline __m512 load16(const void* src, std::uint64_t i) {
  if constexpr (F16)
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(src) + i)));
  else
    return _mm512_loadu_ps(static_cast<const float*>(src) + i);
}

// A running maximum of |w| over a row, 64 elements at a time, NaN left out
// as kmath::abs_max_step leaves it out: for f32 by maxps (which keeps the
// running value where the element is NaN); for f16 on the bits, as
// row_abs_max_f16 (with the sign cleared, f16 patterns order like their
// values, and NaN patterns, above 0x7c00, are zeroed).
template <bool F16>
struct RowMax512 {
  __m512 f32[4];
  __m512i f16[2];
};

template <bool F16>
BALLAST_SIMD512 inline void row_max_start(RowMax512<F16>& m) {
  for (auto& v : m.f32) v = _mm512_setzero_ps();
  for (auto& v : m.f16) v = _mm512_setzero_si512();
}

template <bool F16>
BALLAST_SIMD512 inline void row_max_step(RowMax512<F16>& m, const void* row, std::uint64_t i) {
  if constexpr (F16) {
    const auto* h = static_cast<const std::uint16_t*>(row) + i;
    const __m512i sign_off = _mm512_set1_epi16(0x7fff), inf = _mm512_set1_epi16(0x7c00);
    for (int p = 0; p < 2; ++p) {
      const __m512i a = _mm512_and_si512(_mm512_loadu_si512(h + 32 * p), sign_off);
      m.f16[p] = _mm512_max_epu16(m.f16[p], _mm512_maskz_mov_epi16(_mm512_cmple_epu16_mask(a, inf), a));
    }
  } else {
    const auto* w = static_cast<const float*>(row) + i;
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int p = 0; p < 4; ++p)
      m.f32[p] = _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(w + 16 * p), abs_mask), m.f32[p]);
  }
}

// The maximum, with elements [i, k) of the row taken one at a time.
template <bool F16>
BALLAST_SIMD512 inline float row_max_end(const RowMax512<F16>& m, const void* row, std::uint64_t i, std::uint64_t k) {
  if constexpr (F16) {
    alignas(64) std::uint16_t lanes[32];
    _mm512_store_si512(lanes, _mm512_max_epu16(m.f16[0], m.f16[1]));
    return f16_abs_max_end(lanes, 32, static_cast<const std::uint16_t*>(row), i, k);
  } else {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_max_ps(_mm512_max_ps(m.f32[0], m.f32[1]), _mm512_max_ps(m.f32[2], m.f32[3])));
    float r = 0.0f;
    for (float lane : lanes) r = kmath::abs_max_step(r, lane);
    for (; i < k; ++i) r = kmath::abs_max_step(r, static_cast<const float*>(row)[i]);
    return r;
  }
}

// The maximum of an f16 row, 64 at a time. (f32 rows keep the AVX2
// maximum: a 512-bit one measured no faster.)
BALLAST_SIMD512 float row_abs_max512_f16(const void* src, std::uint64_t base, std::uint64_t k) {
  const auto* h = static_cast<const std::uint16_t*>(src) + base;
  RowMax512<true> max;
  row_max_start(max);
  std::uint64_t i = 0;
  for (; i + 64 <= k; i += 64) row_max_step(max, h, i);
  return row_max_end(max, h, i, k);
}

template <bool kClamp>
BALLAST_SIMD512 inline __m128i codes16(__m512 w, __m512 scale) {
  __m512 r = _mm512_div_ps(w, scale);
  const __mmask16 ordered = _mm512_cmp_ps_mask(r, r, _CMP_ORD_Q);
  if constexpr (kClamp) r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  // Rounded half to even in the conversion itself; NaN lanes 0.
  const __m512i i = _mm512_maskz_cvt_roundps_epi32(ordered, r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_cvtsepi32_epi8(i);  // every lane is within [-127, 127]: the saturation never acts
}

// Without the clamp, and where 1 / scale is a normal number: q = w * RN(1 /
// scale) is within 2^-16 of w / scale (two roundings of 2^-24 each, |w /
// scale| <= 128), and RN(w / scale) within 2^-18 of it, so wherever q lies
// 2^-14 or more from every half-integer the two round to the same integer.
// A vector with a lane nearer than that (or a NaN) takes the division
// (NumPy finds such lanes at exact ties and within 2^-18 of one; the bound
// leaves room). The division was what bounded the row on an Intel core; a
// multiply and a few compares are not. On the Xeon of docs/benchmarks.md,
// f16 rows on one thread in cache went from 12.7 GB/s (division) to 19.4
// (this, with codes64_by_inverse's packing), and past the cache on two
// threads from 24.5-25.1 to 27.5-28.2. f32 rows take it too since the step
// of 64 inlines (codes64_by_inverse): on the second Xeon of the benchmarks,
// in cache on two threads, 25-26 GB/s by the division against 32-33; past
// the cache both read at the memory's pace (21-22). (With the step called
// out of line, the multiply had measured slower on f32 rows.)
BALLAST_SIMD512 inline __m128i codes16_by_inverse(__m512 w, __m512 scale, __m512 inverse) {
  const __m512 q = _mm512_mul_ps(w, inverse);
  const __m512 n = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // |q - n| <= 1/2; far from a half-integer means below 1/2 - 2^-14 (a NaN compares false).
  const __m512 off = _mm512_abs_ps(_mm512_sub_ps(q, n));
  if (_mm512_cmp_ps_mask(off, _mm512_set1_ps(0.5f - 0x1p-14f), _CMP_LT_OQ) != 0xffff) return codes16<false>(w, scale);
  return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(n));  // n is a whole number within [-128, 128]
}

// The rare step of 64 with a lane near a half-integer (or a NaN): all four
// sixteens by the division. Out of line and cold, so that the step it
// leaves inlines into the row loop (with it inline, GCC called the whole
// step per 64 codes and reloaded its constants each time).
BALLAST_SIMD512 __attribute__((noinline, cold)) __m512i codes64_by_division(const __m512* w, __m512 scale) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_set_m128i(codes16<false>(w[1], scale), codes16<false>(w[0], scale))),
      _mm256_set_m128i(codes16<false>(w[3], scale), codes16<false>(w[2], scale)), 1);
}

// 64 codes: four sixteens by the multiply, packed to bytes in two steps and
// one permute (fewer shuffles than four narrowing conversions), or all four
// by the division where any lane lies near a half-integer.
template <bool F16>
BALLAST_SIMD512 __attribute__((always_inline)) inline __m512i codes64_by_inverse(const void* src, std::uint64_t i,
                                                                                 __m512 scale, __m512 inverse) {
  __m512 w[4], n[4];
  __mmask16 far = 0xffff;
  for (int p = 0; p < 4; ++p) {
    w[p] = load16<F16>(src, i + 16 * static_cast<std::uint64_t>(p));
    const __m512 q = _mm512_mul_ps(w[p], inverse);
    n[p] = _mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    far &= _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(q, n[p])), _mm512_set1_ps(0.5f - 0x1p-14f), _CMP_LT_OQ);
  }
  if (__builtin_expect(far != 0xffff, 0)) return codes64_by_division(w, scale);
  // packs works within 128-bit lanes: lane L of the bytes holds quad L of
  // each sixteen in turn, so dword d of the result is dword (d % 4) * 4 + d / 4.
  const __m512i p01 = _mm512_packs_epi32(_mm512_cvtps_epi32(n[0]), _mm512_cvtps_epi32(n[1]));
  const __m512i p23 = _mm512_packs_epi32(_mm512_cvtps_epi32(n[2]), _mm512_cvtps_epi32(n[3]));
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_epi32(order, _mm512_packs_epi16(p01, p23));
}

// A row by the division with the clamp: rows with a given maximum, and
// those whose scale is subnormal or infinite (rows with their own normal
// scale take code_row512_and_next_max).
template <bool F16>
BALLAST_SIMD512 void code_row512(const void* src, std::uint64_t base, std::uint64_t k, float scale, std::int8_t* codes,
                                 const char* next_row, bool stream) {
  const __m512 s = _mm512_set1_ps(scale);
  constexpr std::uint64_t kElementBytes = F16 ? 2 : 4;
  std::uint64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    if (next_row != nullptr)
      for (std::uint64_t line = 0; line < 64 * kElementBytes; line += 64)
        _mm_prefetch(next_row + i * kElementBytes + line, _MM_HINT_T0);
    const __m512i c =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(codes16<true>(load16<F16>(src, base + i + 16), s),
                                                                   codes16<true>(load16<F16>(src, base + i), s))),
                           _mm256_set_m128i(codes16<true>(load16<F16>(src, base + i + 48), s),
                                            codes16<true>(load16<F16>(src, base + i + 32), s)),
                           1);
    put64(codes + i, c, stream);
  }
  for (; i + 16 <= k; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), codes16<true>(load16<F16>(src, base + i), s));
  for (; i < k; ++i) codes[i] = kmath::quant_int8_code(load1<F16>(src, base + i), scale);
}

// A row by the multiply (codes16_by_inverse's rule) while the next
// row's maximum is taken in the same loop, its source prefetched 8 KiB
// ahead: the next row is read from memory once, beside the coding, where
// the two-pass driver's maximum pass waited on it. Returns that maximum (0
// without a next row). The prefetch goes to L2 (T1), not L1: on the AMD EPYC
// of docs/benchmarks.md the f32 rows went from 0.47-0.76 of the copy
// (2 KiB, T0) to 0.75-0.87 (0.95-1.03 of their traffic's stream), where
// T0 at 4 KiB changed nothing and T1 at 2 KiB lost; f16 rows unchanged.
// (Each L1 prefetch holds one of the core's few L1 miss buffers until its
// line arrives; an L2 one does not, so more lines are in flight.)
template <bool F16>
BALLAST_SIMD512 float code_row512_and_next_max(const void* src, std::uint64_t base, std::uint64_t k, float scale,
                                               std::int8_t* codes, const void* next, bool stream) {
  constexpr std::uint64_t kElementBytes = F16 ? 2 : 4;
  const __m512 s = _mm512_set1_ps(scale), inverse = _mm512_set1_ps(1.0f / scale);
  RowMax512<F16> max;
  row_max_start(max);
  std::uint64_t i = 0;
  for (; i + 64 <= k; i += 64) {
    if (next != nullptr) {
      for (std::uint64_t line = 0; line < 64 * kElementBytes; line += 64)
        _mm_prefetch(static_cast<const char*>(next) + i * kElementBytes + 8192 + line, _MM_HINT_T1);
      row_max_step(max, next, i);
    }
    put64(codes + i, codes64_by_inverse<F16>(src, base + i, s, inverse), stream);
  }
  const std::uint64_t whole = i;
  for (; i + 16 <= k; i += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), codes16_by_inverse(load16<F16>(src, base + i), s, inverse));
  for (; i < k; ++i) codes[i] = kmath::quant_int8_code(load1<F16>(src, base + i), scale);
  return next != nullptr ? row_max_end(max, next, whole, k) : 0.0f;
}

void quant_int8_rows512(const Quant8Args& a, std::uint64_t row_begin, std::uint64_t row_end) {
  if (a.given_max != nullptr) {
    if (a.f16_src) return quant_int8_rows_given_max<true, code_row512<true>>(a, row_begin, row_end);
    return quant_int8_rows_given_max<false, code_row512<false>>(a, row_begin, row_end);
  }
  // (f32 rows keep the AVX2 maximum pass: a 512-bit one measured no faster.)
  if (a.f16_src)
    return quant_int8_rows_fused<true, row_abs_max512_f16, code_row512_and_next_max<true>, code_row512<true>>(
        a, row_begin, row_end);
  quant_int8_rows_fused<false, row_abs_max<false>, code_row512_and_next_max<false>, code_row512<false>>(a, row_begin,
                                                                                                        row_end);
}

// CPUID and XGETBV directly: clang's __builtin_cpu_supports knows no "f16c".
bool cpu_has_avx2_and_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!osxsave || !avx || !f16c) return false;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & 6u) != 6u) return false;  // the OS saves XMM and YMM state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);  // AVX2
}

// AVX-512 F, BW, VL and DQ, and an OS that saves the opmask and ZMM state.
bool cpu_has_avx512bw() {
  if (!cpu_has_avx2_and_f16c()) return false;
  unsigned a = 0, b = 0, c = 0, d = 0;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & 0xe6u) != 0xe6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const unsigned need = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);  // F, DQ, BW, VL
  return (b & need) == need;
}

}  // namespace

const RowKernels* simd_kernels() {
  static const RowKernels table{"avx2+f16c", transpose_cols, to_f16_from_f32, to_f16_from_bf16, dequant_int4_rows, repack_int4_rows,
                                quant_int8_rows, copy};
  static const bool supported = cpu_has_avx2_and_f16c();
  return supported ? &table : nullptr;
}

// The same kernels but for the byte transpose, dequant_int4, quant_int8,
// the copy and the GGUF decoders to f16, which have AVX-512 forms (kernels_gguf.cpp
// tells the tables apart by address).
const RowKernels* simd512_kernels() {
  static const RowKernels table{"avx512bw+avx2+f16c", transpose_cols512,   to_f16_from_f32_512, to_f16_from_bf16_512,
                                dequant_int4_rows512, repack_int4_rows512, quant_int8_rows512,  copy512};
  static const bool supported = cpu_has_avx512bw();
  return supported ? &table : nullptr;
}

}  // namespace ballast::cpu
