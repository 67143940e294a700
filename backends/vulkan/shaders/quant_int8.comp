#version 460
// quant_int8: f32 (VARIANT 0) or f16 (VARIANT 1) [N, K] to int8 codes
// [N, K] (dst) and f32 scales [N] (dst2). One workgroup per row: the
// row's max |w| is reduced in shared memory, then each invocation writes
// whole output words. The packet pipeline (K a multiple of 16) reads slabs
// of 16 elements as 16-byte packets, writes their 16 codes as one, and
// computes codes by one reciprocal per row (below).
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
// Slab s of a row (16 elements) as four vectors of f32 values, with NaN
// elements marked. f16 sources are decoded exactly (f16_value).
void load_slab(uint row, uint s, out vec4 v[4], out bvec4 nan[4]) {
  if (VARIANT == 0u) {
    const uint first = row * (p.cols >> 2) + 4u * s;
    for (uint i = 0u; i < 4u; ++i) {
      const uvec4 w = ReadPackets(p.src).v[first + i];
      v[i] = uintBitsToFloat(w);
      nan[i] = greaterThan(w & 0x7fffffffu, uvec4(0x7f800000u));
    }
  } else {
    const uint first = row * (p.cols >> 3) + 2u * s;
    for (uint i = 0u; i < 2u; ++i) {
      const uvec4 w = ReadPackets(p.src).v[first + i];
      for (uint h = 0u; h < 2u; ++h) {
        // Elements in order: the low then the high half of each word.
        const uvec4 e = h == 0u ? uvec4(w.x & 0xffffu, w.x >> 16, w.y & 0xffffu, w.y >> 16)
                                : uvec4(w.z & 0xffffu, w.z >> 16, w.w & 0xffffu, w.w >> 16);
        v[2u * i + h] = vec4(f16_value(e.x), f16_value(e.y), f16_value(e.z), f16_value(e.w));
        nan[2u * i + h] = greaterThan(e & 0x7fffu, uvec4(0x7c00u));
      }
    }
  }
}

// The largest |w| of slab s as f32 bits, NaNs left out (integer order is
// float order for non-NaN magnitudes).
uint slab_max_bits(uint row, uint s) {
  uvec4 m = uvec4(0u);
  if (VARIANT == 0u) {
    for (uint i = 0u; i < 4u; ++i) {
      const uvec4 a = ReadPackets(p.src).v[row * (p.cols >> 2) + 4u * s + i] & 0x7fffffffu;
      m = max(m, mix(a, uvec4(0u), greaterThan(a, uvec4(0x7f800000u))));
    }
    return max(max(m.x, m.y), max(m.z, m.w));
  }
  for (uint i = 0u; i < 2u; ++i) {
    const uvec4 w = ReadPackets(p.src).v[row * (p.cols >> 3) + 2u * s + i];
    for (uint h = 0u; h < 2u; ++h) {
      const uvec4 a = (h == 0u ? w : w >> 16) & 0x7fffu;
      m = max(m, mix(a, uvec4(0u), greaterThan(a, uvec4(0x7c00u))));
    }
  }
  return f32_bits_from_f16_bits(max(max(m.x, m.y), max(m.z, m.w)));
}

// Codes by one reciprocal: for a scale in [2^-62, inf), inv = 1/scale is
// within 2.5 ulp (Vulkan's bound for a division), so r = w * inv is within
// 3 ulp of w / scale, and |r| <= 127.0001 puts that under 2^-15. Rounding r
// to nearest even gives the code of the exact quotient, and so of its
// correctly rounded f32 (the reference's), unless r is within 2^-14 of a
// half-integer; such slabs, and NaN elements, take code_of. A subnormal w
// gives |w / scale| < 2^-64, code 0, flushed or not.
uint packed_codes(vec4 v, float inv) {
  precise vec4 r = v * inv;
  const ivec4 c = ivec4(clamp(roundEven(r), vec4(-127.0), vec4(127.0)));
  return (uint(c.x) & 0xffu) | ((uint(c.y) & 0xffu) << 8) | ((uint(c.z) & 0xffu) << 16) | (uint(c.w) << 24);
}

bool needs_division(vec4 v, bvec4 nan, float inv) {
  precise vec4 r = abs(v * inv);
  return any(nan) || any(lessThan(abs(r - floor(r) - 0.5), vec4(1.0 / 16384.0)));
}

void quantize_row_packets(uint row) {
  const uint lid = gl_LocalInvocationID.x;
  const uint threads = gl_WorkGroupSize.x;
  const uint slabs = p.cols >> 4;

  if (lid == 0u) row_max_bits = 0u;
  barrier();
  uint local_max = 0u;
  for (uint s = lid; s < slabs; s += threads) local_max = max(local_max, slab_max_bits(row, s));
  atomicMax(row_max_bits, local_max);
  barrier();
  const uint scale = scale_bits_of(row_max_bits);
  if (lid == 0u) Words(p.dst2).w[row] = scale;
  if (scale == 0u) {  // every element zero or NaN: codes 0
    for (uint s = lid; s < slabs; s += threads) Packets(p.dst).v[row * slabs + s] = uvec4(0u);
    return;
  }
  const bool reciprocal = scale >= (65u << 23) && scale < 0x7f800000u;
  const float inv = 1.0 / uintBitsToFloat(reciprocal ? scale : 0x3f800000u);
  for (uint s = lid; s < slabs; s += threads) {
    vec4 v[4];
    bvec4 nan[4];
    load_slab(row, s, v, nan);
    if (reciprocal && !needs_division(v[0], nan[0], inv) && !needs_division(v[1], nan[1], inv) &&
        !needs_division(v[2], nan[2], inv) && !needs_division(v[3], nan[3], inv)) {
      Packets(p.dst).v[row * slabs + s] =
          uvec4(packed_codes(v[0], inv), packed_codes(v[1], inv), packed_codes(v[2], inv), packed_codes(v[3], inv));
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

  if (lid == 0u) row_max_bits = 0u;
  barrier();
  // |w| compared as integers: the same order as the floats for non-NaN
  // values, and immune to subnormal flushing.
  uint local_max = 0u;
  for (uint k = lid; k < p.cols; k += threads) {
    const uint a = element_bits(row, k) & 0x7fffffffu;
    if (a <= 0x7f800000u && a > local_max) local_max = a;
  }
  atomicMax(row_max_bits, local_max);
  barrier();
  const uint scale = scale_bits_of(row_max_bits);
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
