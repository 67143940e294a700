// GGUF blocks, shared by dequant_gguf and dequant_gguf_f32: a port of
// backends/common/gguf_blocks.hpp's block_value, operation for operation.
// VARIANT is the block type, numbered as gguf_blocks.hpp's Type (the
// DataType value), so each type is its own pipeline and every switch on it
// folds away. Blocks are read byte by byte from the source (read_u8 and
// friends in common.glsl: a block of 18, 22 or 34 bytes starts at any
// 2-byte boundary, so no aligned word is assumed), little-endian.
//
// Every value is at most two IEEE f32 operations, each rounded once:
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

// Element i of the block at byte `b` of the source, as f32 bits. The plain
// float types move bits (no float operation, so NaN payloads and
// subnormals pass untouched); the others are gguf_blocks.hpp's formulas.
uint gguf_value_bits(uint b, uint i) {
  switch (VARIANT) {
    case GGUF_F32: return read_u32(OP_SRC, b + 4u * i);
    case GGUF_F16: return f32_bits_from_f16_bits(read_u16(OP_SRC, b + 2u * i));
    case GGUF_BF16: return read_u16(OP_SRC, b + 2u * i) << 16;
    case GGUF_Q4_0:  // (q - 8) * d
      return floatBitsToUint(g_mul(float(int(low_high_code(b, 2u, i)) - 8), g_f16(b)));
    case GGUF_Q4_1:  // q * d + m
      return floatBitsToUint(g_add(g_mul(float(low_high_code(b, 4u, i)), g_f16(b)), g_f16(b + 2u)));
    case GGUF_Q5_0: {  // (q - 16) * d
      const uint q = low_high_code(b, 6u, i) | (((read_u32(OP_SRC, b + 2u) >> i) & 1u) << 4);
      return floatBitsToUint(g_mul(float(int(q) - 16), g_f16(b)));
    }
    case GGUF_Q5_1: {  // q * d + m
      const uint q = low_high_code(b, 8u, i) | (((read_u32(OP_SRC, b + 4u) >> i) & 1u) << 4);
      return floatBitsToUint(g_add(g_mul(float(q), g_f16(b)), g_f16(b + 2u)));
    }
    case GGUF_Q8_0:  // q * d
      return floatBitsToUint(g_mul(float(sign_extend8(g_u8(b + 2u + i))), g_f16(b)));
    case GGUF_Q2_K: {  // (d*sc) * q - dmin*mn
      const uint s = g_u8(b + (i >> 4));
      const float dl = g_mul(g_f16(b + 80u), float(s & 15u));
      const float ml = g_mul(g_f16(b + 82u), float(s >> 4));
      return floatBitsToUint(g_sub(g_mul(dl, float(k_code2(b, 16u, i))), ml));
    }
    case GGUF_Q3_K: {  // (d*sc) * (q - 4*!high)
      const uint h = i >> 7, j = (i >> 5) & 3u, gl = i & 31u;
      const bool high = ((g_u8(b + gl) >> (4u * h + j)) & 1u) != 0u;
      const int v = int(k_code2(b, 32u, i)) - (high ? 0 : 4);
      const float dl = g_mul(g_f16(b + 108u), float(q3k_scale(b, 96u, i >> 4)));
      return floatBitsToUint(g_mul(dl, float(v)));
    }
    case GGUF_Q4_K: {  // (d*sc) * q - dmin*mn
      const uint sb = i >> 5;
      const float d1 = g_mul(g_f16(b), float(k_scale(b, 4u, sb)));
      const float m1 = g_mul(g_f16(b + 2u), float(k_min(b, 4u, sb)));
      return floatBitsToUint(g_sub(g_mul(d1, float(k_code4(b, 16u, i))), m1));
    }
    case GGUF_Q5_K: {  // as Q4_K, with 32 bytes of fifth bits before the codes
      const uint sb = i >> 5;
      const uint q = k_code4(b, 48u, i) | (((g_u8(b + 16u + (i & 31u)) >> sb) & 1u) << 4);
      const float d1 = g_mul(g_f16(b), float(k_scale(b, 4u, sb)));
      const float m1 = g_mul(g_f16(b + 2u), float(k_min(b, 4u, sb)));
      return floatBitsToUint(g_sub(g_mul(d1, float(q)), m1));
    }
    case GGUF_Q6_K: {  // (d*sc) * (q - 32)
      const uint h = i >> 7, k = (i >> 5) & 3u, l = i & 31u;
      const uint low = (g_u8(b + 64u * h + 32u * (k & 1u) + l) >> (4u * (k >> 1))) & 15u;
      const uint high = (g_u8(b + 128u + 32u * h + l) >> (2u * k)) & 3u;
      const int q = int(low | (high << 4)) - 32;
      const float dl = g_mul(g_f16(b + 208u), float(sign_extend8(g_u8(b + 192u + (i >> 4)))));
      return floatBitsToUint(g_mul(dl, float(q)));
    }
    default: {  // Q8_K: q * d, d an f32
      const int q = sign_extend8(g_u8(b + 4u + i));
      const uint d_bits = read_u32(OP_SRC, b);
      // |q| >= 1 keeps a normal d's product normal (or inf): only a
      // subnormal d can meet a flushing driver.
      if (is_subnormal_bits(d_bits)) return q8k_subnormal_product(q, d_bits);
      return floatBitsToUint(g_mul(float(q), uintBitsToFloat(d_bits)));
    }
  }
}

// Element e of the [rows, cols] output (flat, row-major): cols is a whole
// number of blocks, so blocks run on across rows and e picks its block and
// the element in it by shifts.
uint gguf_element_bits(uint e) {
  const uint shift = gguf_element_shift();
  return gguf_value_bits((e >> shift) * gguf_block_bytes(), e & ((1u << shift) - 1u));
}

// The output element e as the kind stores it (an f16 in the low half, or
// f32 bits), and its bytes: defined by each shader.
uint out_bits(uint e);
const uint OUT_SHIFT = OUT_BYTES == 2u ? 1u : 2u;

// One word of the output. A word wholly inside an aligned output holds one
// f32 or two f16 and is stored whole; anything else (an output that starts
// off a word boundary, or the last word) byte by byte, through store_word's
// mask, computing each element it touches once.
void process_word(uint word) {
  const int first = int(4u * word) - int(op_shift(OP_DST));
  if (op_shift(OP_DST) == 0u && uint(first) + 4u <= p.dst_bytes) {
    const uint e = uint(first) >> OUT_SHIFT;
    store_word(OP_DST, word, OUT_BYTES == 4u ? out_bits(e) : out_bits(e) | (out_bits(e + 1u) << 16), 0xffffffffu);
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
