// The GGUF block decoders and row loop of kernels_gguf.cpp, included there
// once per instruction set: in namespace `portable` for any CPU, and in
// `avx2` with BALLAST_GGUF_TARGET set to the AVX2 + F16C target attribute,
// so the compiler vectorises the same loops with 256-bit registers (distinct
// namespaces: no function is defined twice with two instruction sets).
// Expects namespace aliases g = kmath::gguf and add/mul/sub in scope.

BALLAST_GGUF_TARGET inline float fl(std::int32_t v) { return static_cast<float>(v); }
BALLAST_GGUF_TARGET inline float fl(std::uint32_t v) { return static_cast<float>(v); }

// One block of `Type` at `b` to the f32 values `y[0 .. elements)`; plain
// float types decode `n` elements at once.
template <std::uint32_t Type>
BALLAST_GGUF_TARGET void decode(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t n);

template <>
BALLAST_GGUF_TARGET void decode<g::kF32>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t n) {
  std::memcpy(y, b, 4u * n);
}
template <>
BALLAST_GGUF_TARGET void decode<g::kF16>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) y[i] = g::f16_at(b, 2u * i);
}
template <>
BALLAST_GGUF_TARGET void decode<g::kBF16>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) y[i] = kmath::f32_from_bits(g::u16_at(b, 2u * i) << 16);
}

// The quantized types element-wise (the AVX2 namespace has its own).
#if !defined(BALLAST_GGUF_FAST_DECODE)
template <>
BALLAST_GGUF_TARGET void decode<g::kQ4_0>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = g::f16_at(b, 0);
  // Low nibbles, then high: two loops of one stride each vectorise.
  for (std::uint32_t j = 0; j < 16; ++j) y[j] = mul(fl(static_cast<std::int32_t>(b[2 + j] & 15u) - 8), d);
  for (std::uint32_t j = 0; j < 16; ++j) y[j + 16] = mul(fl(static_cast<std::int32_t>(b[2 + j] >> 4) - 8), d);
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ4_1>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = g::f16_at(b, 0), m = g::f16_at(b, 2);
  for (std::uint32_t j = 0; j < 16; ++j) y[j] = add(mul(fl(b[4 + j] & 15u), d), m);
  for (std::uint32_t j = 0; j < 16; ++j) y[j + 16] = add(mul(fl(static_cast<std::uint32_t>(b[4 + j] >> 4)), d), m);
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ5_0>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = g::f16_at(b, 0);
  const std::uint32_t qh = g::u32_at(b, 2);
  for (std::uint32_t j = 0; j < 16; ++j) {
    const std::uint32_t lo = (b[6 + j] & 15u) | (((qh >> j) & 1u) << 4);
    const std::uint32_t hi = (b[6 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
    y[j] = mul(fl(static_cast<std::int32_t>(lo) - 16), d);
    y[j + 16] = mul(fl(static_cast<std::int32_t>(hi) - 16), d);
  }
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ5_1>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = g::f16_at(b, 0), m = g::f16_at(b, 2);
  const std::uint32_t qh = g::u32_at(b, 4);
  for (std::uint32_t j = 0; j < 16; ++j) {
    const std::uint32_t lo = (b[8 + j] & 15u) | (((qh >> j) & 1u) << 4);
    const std::uint32_t hi = (b[8 + j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
    y[j] = add(mul(fl(lo), d), m);
    y[j + 16] = add(mul(fl(hi), d), m);
  }
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ8_0>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = g::f16_at(b, 0);
  for (std::uint32_t j = 0; j < 32; ++j) y[j] = mul(fl(static_cast<std::int32_t>(static_cast<std::int8_t>(b[2 + j]))), d);
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ8_K>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = kmath::f32_from_bits(g::u32_at(b, 0));
  for (std::uint32_t j = 0; j < 256; ++j) y[j] = mul(fl(static_cast<std::int32_t>(static_cast<std::int8_t>(b[4 + j]))), d);
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ2_K>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = g::f16_at(b, 80), dmin = g::f16_at(b, 82);
  for (std::uint32_t k = 0; k < 16; ++k) {  // sub-block k = 8h + 2j + g
    const float dl = mul(d, fl(b[k] & 15u)), ml = mul(dmin, fl(static_cast<std::uint32_t>(b[k] >> 4)));
    const std::uint8_t* qs = b + 16 + 32 * (k >> 3) + 16 * (k & 1u);
    const std::uint32_t shift = 2 * ((k >> 1) & 3u);
    for (std::uint32_t l = 0; l < 16; ++l) y[16 * k + l] = sub(mul(dl, fl((qs[l] >> shift) & 3u)), ml);
  }
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ3_K>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = g::f16_at(b, 108);
  for (std::uint32_t k = 0; k < 16; ++k) {
    const std::uint32_t h = k >> 3, j = (k >> 1) & 3u, half = k & 1u;
    const float dl = mul(d, fl(g::q3k_scale(b, 96, k)));
    const std::uint8_t* qs = b + 32 + 32 * h + 16 * half;
    const std::uint8_t* hm = b + 16 * half;
    for (std::uint32_t l = 0; l < 16; ++l) {
      const std::int32_t q = static_cast<std::int32_t>((qs[l] >> (2 * j)) & 3u) - (((hm[l] >> (4 * h + j)) & 1u) ? 0 : 4);
      y[16 * k + l] = mul(dl, fl(q));
    }
  }
}
template <bool Five>
BALLAST_GGUF_TARGET void decode_q45k(const std::uint8_t* __restrict b, float* __restrict y) {
  const float d = g::f16_at(b, 0), dmin = g::f16_at(b, 2);
  const std::uint8_t* qs = b + (Five ? 48 : 16);
  for (std::uint32_t s = 0; s < 8; ++s) {
    const float d1 = mul(d, fl(g::k_scale(b, 4, s))), m1 = mul(dmin, fl(g::k_min(b, 4, s)));
    const std::uint8_t* q4 = qs + 32 * (s >> 1);
    const std::uint32_t shift = 4 * (s & 1u);
    for (std::uint32_t l = 0; l < 32; ++l) {
      std::uint32_t q = (q4[l] >> shift) & 15u;
      if constexpr (Five) q |= ((b[16 + l] >> s) & 1u) << 4;
      y[32 * s + l] = sub(mul(d1, fl(q)), m1);
    }
  }
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ4_K>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  decode_q45k<false>(b, y);
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ5_K>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  decode_q45k<true>(b, y);
}
template <>
BALLAST_GGUF_TARGET void decode<g::kQ6_K>(const std::uint8_t* __restrict b, float* __restrict y, std::uint32_t) {
  const float d = g::f16_at(b, 208);
  float dl[16];
  for (std::uint32_t t = 0; t < 16; ++t) dl[t] = mul(d, fl(static_cast<std::int32_t>(static_cast<std::int8_t>(b[192 + t]))));
  for (std::uint32_t h = 0; h < 2; ++h)
    for (std::uint32_t k = 0; k < 4; ++k) {
      const std::uint8_t* ql = b + 64 * h + 32 * (k & 1u);
      const std::uint8_t* qh = b + 128 + 32 * h;
      const std::uint32_t low_shift = 4 * (k >> 1), high_shift = 2 * k;
      float* out = y + 128 * h + 32 * k;
      for (std::uint32_t half = 0; half < 2; ++half) {  // 16 elements per scale: (128h + 32k + l) / 16
        const float scale = dl[8 * h + 2 * k + half];
        for (std::uint32_t l = 16 * half; l < 16 * half + 16; ++l) {
          const std::int32_t q =
              static_cast<std::int32_t>(((ql[l] >> low_shift) & 15u) | (((qh[l] >> high_shift) & 3u) << 4)) - 32;
          out[l] = mul(scale, fl(q));
        }
      }
    }
}

#endif  // !BALLAST_GGUF_FAST_DECODE

#if defined(BALLAST_GGUF_FAST_DECODE)
// The including namespace's own decoders of the quantized types (kernels_gguf.cpp's
// AVX2 intrinsics, which must give decode<Type>'s bits): Fast<Type>::block
// writes one block's values as f32 or f16 (the destination's type), to a
// plain or a Streamed destination.
template <std::uint32_t Type>
struct Fast;
// A destination written with non-temporal stores (GgufArgs::stream).
template <class T>
struct Streamed {
  T* p;
};
template <class T>
BALLAST_GGUF_TARGET inline Streamed<T> operator+(Streamed<T> y, std::uint32_t i) {
  return {y.p + i};
}
template <bool Stream, class T>
BALLAST_GGUF_TARGET inline auto destination(T* p) {
  if constexpr (Stream) return Streamed<T>{p};
  else return p;
}

// Rows of a quantized type, block by block straight into `out` (f32 or
// f16), the source prefetched (kernels_gguf.cpp's Prefetch says why).
template <std::uint32_t Type, bool Stream, class T>
BALLAST_GGUF_TARGET void fast_rows_to(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end, T* out) {
  const std::uint64_t blocks = a.cols / a.block_elements;
  const std::uint8_t* blk = a.src + row_begin * blocks * a.block_bytes;
  const std::uint64_t end = row_end * a.cols;
  Prefetch ahead(blk);
  for (std::uint64_t at = row_begin * a.cols; at < end; at += a.block_elements, blk += a.block_bytes) {
    ahead.through(blk, a.block_bytes);
    Fast<Type>::block(blk, destination<Stream>(out + at));
  }
  if constexpr (Stream) _mm_sfence();  // the streamed lines reach memory before the launch completes
}
template <std::uint32_t Type, bool Stream>
BALLAST_GGUF_TARGET void fast_rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  if (a.f32_out != nullptr) return fast_rows_to<Type, Stream>(a, row_begin, row_end, a.f32_out);
  fast_rows_to<Type, Stream>(a, row_begin, row_end, a.f16_out);
}
#endif

// Elements decoded before one f16 conversion: a few blocks of any type.
constexpr std::uint32_t kRun = 1024;

// Rows through decode<Type>: f32 straight into the output, f16 through a
// buffer of kRun values and the table's rounding.
template <std::uint32_t Type>
BALLAST_GGUF_TARGET void decoded_rows(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
  const bool plain = a.block_elements == 1;
  const std::uint64_t row_bytes = a.cols / a.block_elements * a.block_bytes;
  alignas(64) float values[kRun];
  for (std::uint64_t r = row_begin; r < row_end; ++r) {
    const std::uint8_t* row = a.src + r * row_bytes;
    for (std::uint64_t c = 0; c < a.cols;) {
      // A run of whole blocks (or of kRun plain elements) within the row,
      // straight into an f32 output or through `values` for f16.
      const std::uint64_t left = a.cols - c;
      const auto n = static_cast<std::uint32_t>(left < kRun ? left : kRun);
      const std::uint64_t at = r * a.cols + c;
      float* y = a.f32_out != nullptr ? a.f32_out + at : values;
      if (plain) {
        decode<Type>(row + c * a.block_bytes, y, n);
      } else {
        const std::uint8_t* blk = row + c / a.block_elements * a.block_bytes;
        for (std::uint32_t i = 0; i < n; i += a.block_elements, blk += a.block_bytes) decode<Type>(blk, y + i, 0);
      }
      if (a.f32_out == nullptr) a.to_f16(values, a.f16_out + at, n, false);
      c += n;
    }
  }
}

template <std::uint32_t Type>
BALLAST_GGUF_TARGET void rows_of(const GgufArgs& a, std::uint64_t row_begin, std::uint64_t row_end) {
#if defined(BALLAST_GGUF_FAST_DECODE)
  if constexpr (Type != g::kF32 && Type != g::kF16 && Type != g::kBF16)
    return a.stream ? fast_rows<Type, true>(a, row_begin, row_end) : fast_rows<Type, false>(a, row_begin, row_end);
  else
#endif
    return decoded_rows<Type>(a, row_begin, row_end);
}
