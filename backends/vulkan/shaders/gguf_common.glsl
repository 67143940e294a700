// GGUF blocks, shared by dequant_gguf and dequant_gguf_f32: a port of
// backends/common/gguf_blocks.hpp's block_value, operation for operation.
// VARIANT is the block type, numbered as gguf_blocks.hpp's Type (the
// DataType value), so each type is its own pipeline and every switch on it
// folds away. Blocks are read byte by byte from the source (read_u8 and
// friends in common.glsl: a block of 18, 22 or 34 bytes starts at any
// 2-byte boundary, so no aligned word is assumed), little-endian.
//
// Every value is a few IEEE f32 operations, each rounded once:
// `precise` on every result forbids fusing a product into the add or
// subtract that follows it, so the bits are the CPU's.

const uint GGUF_F32 = 1u, GGUF_F16 = 10u, GGUF_BF16 = 16u;
const uint GGUF_Q4_0 = 2002u, GGUF_Q4_1 = 2003u, GGUF_Q5_0 = 2006u, GGUF_Q5_1 = 2007u, GGUF_Q8_0 = 2008u;
const uint GGUF_Q2_K = 2010u, GGUF_Q3_K = 2011u, GGUF_Q4_K = 2012u, GGUF_Q5_K = 2013u, GGUF_Q6_K = 2014u,
           GGUF_Q8_K = 2015u;

// Elements per block (kinds::kGgufBlocks), as a shift: 1, 32 or 256.
uint gguf_element_shift() {
  if (VARIANT == GGUF_F32 || VARIANT == GGUF_F16 || VARIANT == GGUF_BF16) return 0u;
  if (VARIANT >= GGUF_Q2_K) return 8u;
  return 5u;
}

uint gguf_block_bytes() {
  switch (VARIANT) {
    case GGUF_F32: return 4u;
    case GGUF_F16: return 2u;
    case GGUF_BF16: return 2u;
    case GGUF_Q4_0: return 18u;
    case GGUF_Q4_1: return 20u;
    case GGUF_Q5_0: return 22u;
    case GGUF_Q5_1: return 24u;
    case GGUF_Q8_0: return 34u;
    case GGUF_Q2_K: return 84u;
    case GGUF_Q3_K: return 110u;
    case GGUF_Q4_K: return 144u;
    case GGUF_Q5_K: return 176u;
    case GGUF_Q6_K: return 210u;
    default: return 292u;  // Q8_K
  }
}

uint g_u8(uint at) { return read_u8(OP_SRC, at); }

float g_f16(uint at) { return uintBitsToFloat(f32_bits_from_f16_bits(read_u16(OP_SRC, at))); }

float g_mul(float a, float b) {
  precise float r = a * b;
  return r;
}

float g_add(float a, float b) {
  precise float r = a + b;
  return r;
}

float g_sub(float a, float b) {
  precise float r = a - b;
  return r;
}

// gguf_blocks.hpp's helpers; `b` is the block's byte offset in the source.
uint low_high_code(uint b, uint at, uint i) {
  return i < 16u ? (g_u8(b + at + i) & 15u) : (g_u8(b + at + i - 16u) >> 4);
}

uint k_scale(uint b, uint at, uint sb) {
  if (sb < 4u) return g_u8(b + at + sb) & 63u;
  return (g_u8(b + at + sb + 4u) & 15u) | ((g_u8(b + at + sb - 4u) >> 6) << 4);
}

uint k_min(uint b, uint at, uint sb) {
  if (sb < 4u) return g_u8(b + at + sb + 4u) & 63u;
  return (g_u8(b + at + sb + 4u) >> 4) | ((g_u8(b + at + sb) >> 6) << 4);
}

uint k_code4(uint b, uint at, uint i) {
  const uint byte_ = g_u8(b + at + (i >> 6) * 32u + (i & 31u));
  return (i & 32u) != 0u ? (byte_ >> 4) : (byte_ & 15u);
}

uint k_code2(uint b, uint at, uint i) {
  const uint h = i >> 7, j = (i >> 5) & 3u, gl = i & 31u;
  return (g_u8(b + at + 32u * h + gl) >> (2u * j)) & 3u;
}

int q3k_scale(uint b, uint at, uint k) {
  const uint low4 = k < 8u ? (g_u8(b + at + k) & 15u) : (g_u8(b + at + k - 8u) >> 4);
  const uint high2 = (g_u8(b + at + 8u + (k & 3u)) >> (2u * (k >> 2))) & 3u;
  return int(low4 | (high2 << 4)) - 32;
}

// A byte as int8.
int sign_extend8(uint x) { return bitfieldExtract(int(x), 0, 8); }

// q * d for Q8_K's subnormal f32 scale d, by integer logic: a driver may
// flush subnormal operands (shaderDenormPreserveFloat32 is optional), which
// would give a zero where the CPU gives a subnormal or small normal. With
// d = m * 2^-149 (m < 2^23) the exact product is v * 2^-149, v = |q| * m
// < 2^30; below 2^24 its f32 bits are v itself (exponent field 0 or 1),
// above it the significand is v rounded to 24 bits (to nearest even), and
// adding it to the exponent field lets a carry bump the exponent.
uint q8k_subnormal_product(int q, uint d_bits) {
  const uint sign = (d_bits & 0x80000000u) ^ (q < 0 ? 0x80000000u : 0u);
  const uint v = uint(abs(q)) * (d_bits & 0x7fffffu);
  if (v < 0x1000000u) return sign | v;
  const uint s = uint(findMSB(v)) - 23u;  // 1..6
  uint significand = v >> s;
  const uint rem = v & ((1u << s) - 1u), half_ = 1u << (s - 1u);
  if (rem > half_ || (rem == half_ && (significand & 1u) != 0u)) ++significand;
  return sign | ((s << 23) + significand);
}

// The quantized types' formulas are split where elements share work: the
// scale is what depends only on the element's scale group (16 or more
// consecutive elements: the block's d, or d*sc and dmin*mn of a sub-block),
// the code is the element's integer (offsets such as -8 or -32 applied),
// and gguf_combine applies the operations gguf_blocks.hpp applies to them,
// in its order. Two neighbours of one word then compute the scale once.
struct GgufScale {
  float d;   // the code's factor
  float m;   // Q4_1, Q5_1: added; Q2_K, Q4_K, Q5_K: subtracted
  uint raw;  // Q8_K: d's bits, for its subnormal check
};

GgufScale gguf_scale(uint b, uint i) {
  GgufScale s = GgufScale(0.0, 0.0, 0u);
  switch (VARIANT) {
    case GGUF_Q4_1:
    case GGUF_Q5_1:
      s.d = g_f16(b);
      s.m = g_f16(b + 2u);
      break;
    case GGUF_Q8_K:
      s.raw = read_u32(OP_SRC, b);
      s.d = uintBitsToFloat(s.raw);
      break;
    case GGUF_Q2_K: {
      const uint sc = g_u8(b + (i >> 4));
      s.d = g_mul(g_f16(b + 80u), float(sc & 15u));
      s.m = g_mul(g_f16(b + 82u), float(sc >> 4));
      break;
    }
    case GGUF_Q3_K: s.d = g_mul(g_f16(b + 108u), float(q3k_scale(b, 96u, i >> 4))); break;
    case GGUF_Q4_K:
    case GGUF_Q5_K:
      s.d = g_mul(g_f16(b), float(k_scale(b, 4u, i >> 5)));
      s.m = g_mul(g_f16(b + 2u), float(k_min(b, 4u, i >> 5)));
      break;
    case GGUF_Q6_K: s.d = g_mul(g_f16(b + 208u), float(sign_extend8(g_u8(b + 192u + (i >> 4))))); break;
    default: s.d = g_f16(b);  // Q4_0, Q5_0, Q8_0
  }
  return s;
}

int gguf_code(uint b, uint i) {
  switch (VARIANT) {
    case GGUF_Q4_0: return int(low_high_code(b, 2u, i)) - 8;
    case GGUF_Q4_1: return int(low_high_code(b, 4u, i));
    case GGUF_Q5_0:  // low nibble, fifth bit from the u32 at byte 2
      return int(low_high_code(b, 6u, i) | (((read_u32(OP_SRC, b + 2u) >> i) & 1u) << 4)) - 16;
    case GGUF_Q5_1: return int(low_high_code(b, 8u, i) | (((read_u32(OP_SRC, b + 4u) >> i) & 1u) << 4));
    case GGUF_Q8_0: return sign_extend8(g_u8(b + 2u + i));
    case GGUF_Q8_K: return sign_extend8(g_u8(b + 4u + i));
    case GGUF_Q2_K: return int(k_code2(b, 16u, i));
    case GGUF_Q3_K: {  // q - 4 where the high bit is clear
      const uint h = i >> 7, j = (i >> 5) & 3u, gl = i & 31u;
      const bool high = ((g_u8(b + gl) >> (4u * h + j)) & 1u) != 0u;
      return int(k_code2(b, 32u, i)) - (high ? 0 : 4);
    }
    case GGUF_Q4_K: return int(k_code4(b, 16u, i));
    case GGUF_Q5_K: return int(k_code4(b, 48u, i) | (((g_u8(b + 16u + (i & 31u)) >> (i >> 5)) & 1u) << 4));
    default: {  // Q6_K: four low bits and two high ones, less 32
      const uint h = i >> 7, k = (i >> 5) & 3u, l = i & 31u;
      const uint low = (g_u8(b + 64u * h + 32u * (k & 1u) + l) >> (4u * (k >> 1))) & 15u;
      const uint high = (g_u8(b + 128u + 32u * h + l) >> (2u * k)) & 3u;
      return int(low | (high << 4)) - 32;
    }
  }
}

// gguf_blocks.hpp's operations on a scale and a code, as f32 bits:
//   Q4_0, Q5_0, Q8_0, Q8_K  q * d
//   Q4_1, Q5_1              q * d + m
//   Q2_K, Q4_K, Q5_K        (d*sc) * q - dmin*mn
//   Q3_K, Q6_K              (d*sc) * q
uint gguf_combine(GgufScale s, int code) {
  // |q| >= 1 keeps a normal d's product normal (or inf): only Q8_K's f32
  // scale, when subnormal, can meet a flushing driver.
  if (VARIANT == GGUF_Q8_K && is_subnormal_bits(s.raw)) return q8k_subnormal_product(code, s.raw);
  switch (VARIANT) {
    case GGUF_Q4_1:
    case GGUF_Q5_1: return floatBitsToUint(g_add(g_mul(float(code), s.d), s.m));
    case GGUF_Q2_K:
    case GGUF_Q4_K:
    case GGUF_Q5_K: return floatBitsToUint(g_sub(g_mul(s.d, float(code)), s.m));
    case GGUF_Q3_K:
    case GGUF_Q6_K: return floatBitsToUint(g_mul(s.d, float(code)));
    default: return floatBitsToUint(g_mul(float(code), s.d));
  }
}

bool gguf_plain() { return VARIANT == GGUF_F32 || VARIANT == GGUF_F16 || VARIANT == GGUF_BF16; }

// Element i of the block at byte `b` of the source, as f32 bits. The plain
// float types move bits (no float operation, so NaN payloads and
// subnormals pass untouched).
uint gguf_value_bits(uint b, uint i) {
  if (VARIANT == GGUF_F32) return read_u32(OP_SRC, b + 4u * i);
  if (VARIANT == GGUF_F16) return f32_bits_from_f16_bits(read_u16(OP_SRC, b + 2u * i));
  if (VARIANT == GGUF_BF16) return read_u16(OP_SRC, b + 2u * i) << 16;
  return gguf_combine(gguf_scale(b, i), gguf_code(b, i));
}

// Element e of the [rows, cols] output (flat, row-major): cols is a whole
// number of blocks, so blocks run on across rows and e picks its block and
// the element in it by shifts.
uint gguf_element_bits(uint e) {
  const uint shift = gguf_element_shift();
  return gguf_value_bits((e >> shift) * gguf_block_bytes(), e & ((1u << shift) - 1u));
}

// Elements e and e + 1 for an even e: of one scale group in the quantized
// types (groups are 16 or more elements and start at multiples of 16).
uvec2 gguf_element_pair_bits(uint e) {
  if (gguf_plain()) return uvec2(gguf_element_bits(e), gguf_element_bits(e + 1u));
  const uint shift = gguf_element_shift();
  const uint b = (e >> shift) * gguf_block_bytes(), i = e & ((1u << shift) - 1u);
  const GgufScale s = gguf_scale(b, i);
  return uvec2(gguf_combine(s, gguf_code(b, i)), gguf_combine(s, gguf_code(b, i + 1u)));
}

// Below: dequant_gguf's output (OUT_BYTES, out_of_bits, process_word).
// repack_gguf_int4 defines GGUF_BLOCKS_ONLY to take the block readers
// above and write its own outputs.
#ifndef GGUF_BLOCKS_ONLY
// The output's element type from f32 bits (f16 bits in the low half, or
// the f32 bits themselves) and its bytes: defined by each shader.
uint out_of_bits(uint f32_bits);
const uint OUT_SHIFT = OUT_BYTES == 2u ? 1u : 2u;

uint out_bits(uint e) { return out_of_bits(gguf_element_bits(e)); }

// One word of the output. A word wholly inside an aligned output holds one
// f32 or two f16 and is stored whole; anything else (an output that starts
// off a word boundary, or the last word) byte by byte, through store_word's
// mask, computing each element it touches once.
void process_word(uint word) {
  const int first = int(4u * word) - int(op_shift(OP_DST));
  if (op_shift(OP_DST) == 0u && uint(first) + 4u <= p.dst_bytes) {
    const uint e = uint(first) >> OUT_SHIFT;
    uint value;
    if (OUT_BYTES == 4u) {
      value = out_bits(e);
    } else {
      const uvec2 v = gguf_element_pair_bits(e);
      value = out_of_bits(v.x) | (out_of_bits(v.y) << 16);
    }
    store_word(OP_DST, word, value, 0xffffffffu);
    return;
  }
  uint value = 0u, mask = 0u, cached_e = 0xffffffffu, cached = 0u;
  for (uint b = 0u; b < 4u; ++b) {
    const int o = first + int(b);
    if (o < 0 || uint(o) >= p.dst_bytes) continue;
    const uint e = uint(o) >> OUT_SHIFT;
    if (e != cached_e) {
      cached = out_bits(e);
      cached_e = e;
    }
    value |= ((cached >> (8u * (uint(o) & (OUT_BYTES - 1u)))) & 0xffu) << (8u * b);
    mask |= 0xffu << (8u * b);
  }
  store_word(OP_DST, word, value, mask);
}
#endif  // GGUF_BLOCKS_ONLY
