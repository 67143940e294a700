#version 460
// dequant_int4: f16 [N, K] = (q - zp) * scale in f32, rounded once to f16.
// Packet pipeline (K a multiple of 8): one invocation per 16-byte packet
// of the output, eight columns of one row, which share a block and take
// one 32-bit word of codes; neighbouring invocations write neighbouring
// packets. General pipeline: one invocation per 32-bit word of the output.
#include "common.glsl"
#include "int4_common.glsl"

// (q - zp) * scale exactly as IEEE f32 would give it, then to f16. `precise`
// forbids fusing the two operations. A subnormal zero point is the one
// input a flushing driver would get visibly wrong (q = 0 gives -zp, whose
// sign survives to the f16 zero); everything else that is subnormal
// rounds to a signed f16 zero either way.
uint dequant_f16(uint q, uint zp_bits, uint scale_bits_) {
  precise float diff;
  if (is_subnormal_bits(zp_bits))
    diff = q == 0u ? uintBitsToFloat(zp_bits ^ 0x80000000u) : float(q);
  else
    diff = float(q) - uintBitsToFloat(zp_bits);
  precise float value = diff * uintBitsToFloat(scale_bits_);
  return f16_bits_from_f32_bits(floatBitsToUint(value));
}

uint f16_of(uint e) {
  const uint n = e / p.cols;
  const uint k = e - n * p.cols;
  const uint block = k >> block_shift();
  return dequant_f16(int4_code(n, k), zero_point_bits(n, block), scale_bits(n, block));
}

void process_word(uint word) {
  const int first = int(4u * word) - int(op_shift(OP_DST));
  if (op_shift(OP_DST) == 0u && uint(first) + 4u <= p.dst_bytes) {
    const uint e = uint(first) >> 1;
    if ((p.cols & 1u) == 0u) {
      // K even: the word's two columns k, k+1 (k even) share the row, the
      // byte of B (low and high nibble), the block, scale and zero point.
      const uint n = e / p.cols;
      const uint k = e - n * p.cols;
      const uint block = k >> block_shift();
      const uint byte_ = read_u8(OP_SRC, n * (k_blocks() * (p.block_size >> 1)) + (k >> 1));
      const uint zp = zero_point_bits(n, block), scale = scale_bits(n, block);
      store_word(OP_DST, word, dequant_f16(byte_ & 0xfu, zp, scale) | (dequant_f16(byte_ >> 4, zp, scale) << 16), 0xffffffffu);
      return;
    }
    store_word(OP_DST, word, f16_of(e) | (f16_of(e + 1u) << 16), 0xffffffffu);
    return;
  }
  uint value = 0u, mask = 0u;
  for (uint b = 0u; b < 4u; ++b) {
    const int o = first + int(b);
    if (o < 0 || uint(o) >= p.dst_bytes) continue;
    value |= ((f16_of(uint(o) >> 1) >> (8u * (uint(o) & 1u))) & 0xffu) << (8u * b);
    mask |= 0xffu << (8u * b);
  }
  store_word(OP_DST, word, value, mask);
}

void dequant_packet(uint packet) {
  const uint n = row_of_packet(packet);
  const uint k = (packet - n * (p.cols >> 3)) << 3;  // first of the packet's eight columns
  const uint block = k >> block_shift();
  const uint codes = ReadWords(p.src).w[n * (k_blocks() * (p.block_size >> 3)) + (k >> 3)];
  const uint zp = zero_point_bits(n, block), scale = scale_bits(n, block);
  if (!is_subnormal_bits(zp)) {
    const uvec4 q_lo = uvec4(codes, codes >> 4, codes >> 8, codes >> 12) & 0xfu;
    const uvec4 q_hi = uvec4(codes >> 16, codes >> 20, codes >> 24, codes >> 28) & 0xfu;
    precise vec4 lo = (vec4(q_lo) - uintBitsToFloat(zp)) * uintBitsToFloat(scale);
    precise vec4 hi = (vec4(q_hi) - uintBitsToFloat(zp)) * uintBitsToFloat(scale);
    const uvec4 a = floatBitsToUint(lo), b = floatBitsToUint(hi);
    if (all_f16_fast(a) && all_f16_fast(b)) {
      Packets(p.dst).v[packet] = f16_packet_fast(a, b);
      return;
    }
  }
  // A subnormal zero point or a result that is not a normal f16 or zero: word by word.
  [[dont_unroll]] for (uint i = 0u; i < 4u; ++i) process_word(4u * packet + i);
}

void main() {
  if (FAST == 1u) {
    if (packet_index() < p.total) dequant_packet(packet_index());
  } else {
    run_words();
  }
}
