// quant_int8 and quant_int8_given_max (the shaders quant_int8.comp and
// quant_int8_given_max.comp include this after setting GIVEN_MAX):
// f32 (VARIANT 0) or f16 (VARIANT 1) [N, K] to int8 codes
// [N, K] (dst) and f32 scales [N] (dst2). One workgroup per row: the
// row's max |w| is reduced in shared memory (GIVEN_MAX: read from the
// scales operand instead, kmath::given_row_max), then each invocation writes
// whole output words. The packet pipeline (K a multiple of 16; quant_int8
// only) reads slabs of 16 elements as 16-byte packets, writes their 16 codes
// as one, and computes codes by one reciprocal per row (below).
#include "common.glsl"

const uint INV_127_BITS = 0x3c010204u;  // 1.0f / 127.0f, rounded to f32 as the reference does

shared uint row_max_bits;

uint element_bits(uint row, uint k) {
  const uint index = row * p.cols + k;
  return VARIANT == 0u ? read_u32(OP_SRC, 4u * index) : f32_bits_from_f16_bits(read_u16(OP_SRC, 2u * index));
}

// x * y (both non-negative, y normal) when the product is below the
// smallest normal f32: exact integer arithmetic, rounded to nearest even
// into the subnormal range, so a flushing driver still gets the
// reference's scale.
uint multiply_into_subnormal(uint x, uint y) {
  uint mx = x & 0x7fffffu;
  int ex = -149;
  if ((x >> 23) != 0u) {
    mx |= 0x800000u;
    ex = int(x >> 23) - 150;
  }
  const uint my = (y & 0x7fffffu) | 0x800000u;
  const int ey = int(y >> 23) - 150;
  uint hi, lo;
  umulExtended(mx, my, hi, lo);  // the exact product, < 2^48
  const int shift = -(ex + ey + 149);  // result = product >> shift, in units of 2^-149
  if (shift <= 0) return floatBitsToUint(uintBitsToFloat(x) * uintBitsToFloat(y));  // not small after all
  if (shift > 48) return 0u;  // below half the smallest subnormal
  uint q, rem_hi, rem_lo, half_hi, half_lo;
  if (shift < 32) {
    if ((hi >> shift) != 0u) return floatBitsToUint(uintBitsToFloat(x) * uintBitsToFloat(y));
    q = (lo >> shift) | (shift == 0 ? 0u : hi << (32 - shift));
    rem_hi = 0u;
    rem_lo = lo & ((1u << shift) - 1u);
    half_hi = 0u;
    half_lo = 1u << (shift - 1);
  } else {
    const int s = shift - 32;
    q = hi >> s;
    rem_hi = s == 0 ? 0u : hi & ((1u << s) - 1u);
    rem_lo = lo;
    half_hi = s == 0 ? 0u : 1u << (s - 1);
    half_lo = s == 0 ? 0x80000000u : 0u;
  }
  const bool above = rem_hi > half_hi || (rem_hi == half_hi && rem_lo > half_lo);
  const bool tie = rem_hi == half_hi && rem_lo == half_lo;
  if (above || (tie && (q & 1u) != 0u)) ++q;
  return q;  // 0x00800000 when it rounds up to the smallest normal: correct
}

uint scale_bits_of(uint max_bits) {
  if (max_bits == 0u) return 0u;
  precise float product = uintBitsToFloat(max_bits) * uintBitsToFloat(INV_127_BITS);
  const uint bits = floatBitsToUint(product);
  if (max_bits >= 0x7f800000u || ((bits & 0x7f800000u) != 0u && bits != 0x00800000u && !is_subnormal_bits(max_bits)))
    return bits;
  return multiply_into_subnormal(max_bits, INV_127_BITS);
}

// The value times 2^64, exactly, for |value| < 2^63: moves tiny operands
// out of the subnormal range before a division a driver might flush.
uint times_2_64(uint bits) {
  const uint sign = bits & 0x80000000u;
  const uint ax = bits & 0x7fffffffu;
  if (ax == 0u) return bits;
  if ((ax >> 23) != 0u) return bits + (64u << 23);
  const uint lead = uint(findMSB(ax));  // 0..22
  const uint up = 23u - lead;
  return sign | ((65u - up) << 23) | ((ax << up) & 0x7fffffu);
}

int code_of(uint w_bits, uint scale_bits) {
  if (scale_bits == 0u) return 0;
  uint w = w_bits, s = scale_bits;
  if (s < (65u << 23)) {  // scale < 2^-62: |w| <= 127 * scale is tiny too
    w = times_2_64(w);
    s = times_2_64(s);
  }
  precise float r = uintBitsToFloat(w) / uintBitsToFloat(s);
  const uint r_bits = floatBitsToUint(r);
  if (is_nan_bits(r_bits)) return 0;
  if (r > 127.0) return 127;
  if (r < -127.0) return -127;
  return round_half_even_bits(r_bits);
}

void store_u32(uint op, uint offset, uint value) {
  const uint b = op_shift(op) + offset;
  const uint s = 8u * (b & 3u);
  if (s == 0u) {
    store_word(op, b >> 2, value, 0xffffffffu);
  } else {
    store_word(op, b >> 2, value << s, 0xffffffffu << s);
    store_word(op, (b >> 2) + 1u, value >> (32u - s), 0xffffffffu >> (32u - s));
  }
}

// ------------------------------------------------------------ packets
// Slab s of a row (16 elements) as four vectors of f32 values. f16 sources
// go through the hardware conversion, exact for normal f16; a driver may
// flush f16 subnormals, which is harmless in rows whose maximum is at least
// 2^-6 (below).
void load_slab(uint row, uint s, out vec4 v[4]) {
  if (VARIANT == 0u) {
    [[unroll]] for (uint i = 0u; i < 4u; ++i) v[i] = uintBitsToFloat(ReadPackets(p.src).v[row * (p.cols >> 2) + 4u * s + i]);
  } else {
    [[unroll]] for (uint i = 0u; i < 2u; ++i) {
      const uvec4 w = ReadPackets(p.src).v[row * (p.cols >> 3) + 2u * s + i];
      v[2u * i] = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
      v[2u * i + 1u] = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
    }
  }
}

// The largest magnitude of slab s as integer bits of the source type (f32
// or f16): integer order is float order, and a NaN is above every number,
// so a row with a NaN is seen as such and takes row_max_without_nans.
uint slab_max_magnitude(uint row, uint s) {
  uvec4 m = uvec4(0u);
  if (VARIANT == 0u) {
    [[unroll]] for (uint i = 0u; i < 4u; ++i) m = max(m, ReadPackets(p.src).v[row * (p.cols >> 2) + 4u * s + i] & 0x7fffffffu);
  } else {
    [[unroll]] for (uint i = 0u; i < 2u; ++i) {
      const uvec4 w = ReadPackets(p.src).v[row * (p.cols >> 3) + 2u * s + i];
      m = max(m, max(w & 0x7fffu, (w >> 16) & 0x7fffu));
    }
  }
  return max(max(m.x, m.y), max(m.z, m.w));
}

// 16 codes by one reciprocal: for a scale in [2^-62, inf), inv = 1/scale is
// within 2.5 ulp (Vulkan's bound for a division), so r = w * inv is within
// 3 ulp of w / scale, and |r| <= 127.0001 puts that under 2^-15 (and keeps
// round(r) in [-127, 127]: no clamp). Rounding r to nearest even gives the
// code of the exact quotient, and so of its correctly rounded f32 (the
// reference's), unless r is within 2^-14 of a half-integer: `exact` turns
// false there, and for NaN elements (NaN fails every comparison), and the
// caller takes code_of. A subnormal w gives |w / scale| < 2^-64, code 0,
// flushed or not.
uint codes_of(vec4 v, float inv, inout bool exact) {
  precise vec4 r = v * inv;
  const vec4 c = roundEven(r);
  exact = exact && all(lessThanEqual(abs(r - c), vec4(0.49993896484375)));  // 0.5 - 2^-14
  const ivec4 i = ivec4(c);
  return (uint(i.x) & 0xffu) | ((uint(i.y) & 0xffu) << 8) | ((uint(i.z) & 0xffu) << 16) | (uint(i.w) << 24);
}

shared uint row_max_clean;

// The row's max |w| as f32 bits, NaNs left out, element by element: |w|
// compared as integers, the same order as the floats for non-NaN values,
// and immune to subnormal flushing. The word pipeline's max pass; packet
// rows whose maximum is a NaN.
uint row_max_without_nans(uint row) {
  if (gl_LocalInvocationID.x == 0u) row_max_clean = 0u;
  barrier();
  uint local_max = 0u;
  for (uint k = gl_LocalInvocationID.x; k < p.cols; k += gl_WorkGroupSize.x) {
    const uint a = element_bits(row, k) & 0x7fffffffu;
    if (a <= 0x7f800000u && a > local_max) local_max = a;
  }
  atomicMax(row_max_clean, local_max);
  barrier();
  return row_max_clean;
}

// quant_int8_given_max: the row's maximum as given, as f32 bits: its
// magnitude, a NaN taken as 0 (kmath::given_row_max).
uint given_max_bits(uint row) {
  const uint a = read_u32(OP_SCALES, 4u * row) & 0x7fffffffu;
  return a > 0x7f800000u ? 0u : a;
}

void quantize_row_packets(uint row) {
  const uint lid = gl_LocalInvocationID.x;
  const uint threads = gl_WorkGroupSize.x;
  const uint slabs = p.cols >> 4;

  if (lid == 0u) row_max_bits = 0u;
  barrier();
  uint local_max = 0u;
  for (uint s = lid; s < slabs; s += threads) local_max = max(local_max, slab_max_magnitude(row, s));
  atomicMax(row_max_bits, local_max);
  barrier();
  const uint magnitude = row_max_bits;  // the same in every invocation: the branches below are uniform
  uint max_bits;
  if (magnitude > (VARIANT == 0u ? 0x7f800000u : 0x7c00u)) {
    max_bits = row_max_without_nans(row);
  } else {
    max_bits = VARIANT == 0u ? magnitude : f32_bits_from_f16_bits(magnitude);
  }
  const uint scale = scale_bits_of(max_bits);
  if (lid == 0u) Words(p.dst2).w[row] = scale;
  // f16 rows below 2^-6 could hold subnormals whose codes are not 0.
  const bool reciprocal = scale >= (65u << 23) && scale < 0x7f800000u && (VARIANT == 0u || max_bits >= 0x3c800000u);
  const float inv = 1.0 / uintBitsToFloat(reciprocal ? scale : 0x3f800000u);
  for (uint s = lid; s < slabs; s += threads) {
    vec4 v[4];
    load_slab(row, s, v);
    bool exact = reciprocal;
    const uvec4 codes = uvec4(codes_of(v[0], inv, exact), codes_of(v[1], inv, exact), codes_of(v[2], inv, exact),
                              codes_of(v[3], inv, exact));
    if (exact) {
      Packets(p.dst).v[row * slabs + s] = codes;
      continue;
    }
    [[dont_unroll]] for (uint i = 0u; i < 4u; ++i) {
      uint word = 0u;
      for (uint b = 0u; b < 4u; ++b)
        word |= (uint(code_of(element_bits(row, 16u * s + 4u * i + b), scale)) & 0xffu) << (8u * b);
      Words(p.dst).w[4u * (row * slabs + s) + i] = word;
    }
  }
}

void main() {
  const uint row = p.base + gl_WorkGroupID.x;
  if (row >= p.total) return;  // uniform across the workgroup
  if (FAST == 1u) {
    quantize_row_packets(row);
    return;
  }
  const uint lid = gl_LocalInvocationID.x;
  const uint threads = gl_WorkGroupSize.x;

  const uint scale = scale_bits_of(GIVEN_MAX ? given_max_bits(row) : row_max_without_nans(row));
  if (lid == 0u) store_u32(OP_DST2, 4u * row, scale);

  if (p.cols == 0u) return;
  const uint shift = op_shift(OP_DST);
  const uint row_start = row * p.cols;
  const uint first_word = (shift + row_start) >> 2;
  const uint last_word = (shift + row_start + p.cols - 1u) >> 2;
  for (uint word = first_word + lid; word <= last_word; word += threads) {
    uint value = 0u, mask = 0u;
    for (uint b = 0u; b < 4u; ++b) {
      const int o = int(4u * word + b) - int(shift);
      if (o < int(row_start) || uint(o) >= row_start + p.cols) continue;
      const int code = code_of(element_bits(row, uint(o) - row_start), scale);
      value |= (uint(code) & 0xffu) << (8u * b);
      mask |= 0xffu << (8u * b);
    }
    store_word(OP_DST, word, value, mask);
  }
}
