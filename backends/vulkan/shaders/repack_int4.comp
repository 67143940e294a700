#version 460
// repack_int4, two passes selected by p.mode:
//  0: words [N, ceil(K/8)]: nibble i of word (n, j) holds column
//     8j + (0,2,4,6,1,3,5,7)[i]; columns past K hold the block's zero point;
//  1: pairs [N, k_blocks] of f16 (scale, -scale*zp), scale in the low half.
// One invocation per 32-bit word of the output being written; outputs are
// 32-bit values, so an unaligned destination splits them across words.
// Packet pipeline (K a multiple of 32, p.mode unused): one invocation per
// 16-byte packet of words (32 columns of one row, one 16-byte load of
// codes), which also writes the pair of every block starting in it: one
// dispatch for both outputs.
#include "common.glsl"
#include "int4_common.glsl"

// kernel_math's zero_point_code: a float zero point as a padding nibble.
uint zero_point_code(uint n, uint block) {
  if (ZERO_POINTS == 0u) return 8u;
  const uint bits = zero_point_bits(n, block);
  if (ZERO_POINTS == 1u) return uint(uintBitsToFloat(bits));
  if (is_nan_bits(bits)) return 8u;
  if ((bits >> 31) != 0u || (bits & 0x7fffffffu) == 0u || is_subnormal_bits(bits)) return 0u;  // <= 0, or rounds to 0
  if (uintBitsToFloat(bits) >= 15.0) return 15u;
  return uint(round_half_even_bits(bits));
}

uint repacked_word(uint index) {
  const uint per_row = (p.cols + 7u) >> 3;
  const uint n = index / per_row;
  const uint j = index - n * per_row;
  if (op_shift(OP_SRC) == 0u && 8u * j + 8u <= p.cols) {
    // Columns 8j..8j+7 are the four bytes at 4j of the row (rows are whole
    // words: block_size/2 >= 8 bytes per block): one load, then reorder the
    // nibbles from column order 0..7 to 0,2,4,6,1,3,5,7.
    const uint row_words = k_blocks() * (p.block_size >> 3);
    const uint codes = load_word(OP_SRC, n * row_words + j);
    uint word = 0u;
    for (uint c = 0u; c < 8u; ++c) word |= ((codes >> (4u * c)) & 0xfu) << (4u * ((c >> 1) | ((c & 1u) << 2)));
    return word;
  }
  uint word = 0u;
  for (uint c = 0u; c < 8u; ++c) {
    const uint k = 8u * j + c;
    const uint code = k < p.cols ? int4_code(n, k) : zero_point_code(n, k >> block_shift());
    const uint nibble = (c >> 1) | ((c & 1u) << 2);
    word |= (code & 0xfu) << (4u * nibble);
  }
  return word;
}

// A block's pair as f32 bits: the scale, and -scale * zp (`precise`: no
// fused multiply-add).
uvec2 pair_values(uint n, uint block) {
  const uint s = scale_bits(n, block);
  precise float offset = -(uintBitsToFloat(s) * uintBitsToFloat(zero_point_bits(n, block)));
  return uvec2(s, floatBitsToUint(offset));
}

uint pair_of(uint n, uint block) {
  const uvec2 v = pair_values(n, block);
  if (f16_fast(v.x) && f16_fast(v.y)) return f16_bits_fast(v.x) | (f16_bits_fast(v.y) << 16);
  return f16_bits_from_f32_bits(v.x) | (f16_bits_from_f32_bits(v.y) << 16);
}

uint scale_pair(uint index) {
  const uint n = index / k_blocks();
  return pair_of(n, index - n * k_blocks());
}

uint output_value(uint index) { return p.mode == 0u ? repacked_word(index) : scale_pair(index); }

void process_word(uint word) {
  const uint shift = op_shift(OP_DST);
  const int first = int(4u * word) - int(shift);
  if (shift == 0u) {
    store_word(OP_DST, word, output_value(word), 0xffffffffu);
    return;
  }
  // Bytes [first, first + 4) straddle values first/4 and first/4 + 1.
  uint value = 0u, mask = 0u;
  int cached_index = -1;
  uint cached = 0u;
  for (uint b = 0u; b < 4u; ++b) {
    const int o = first + int(b);
    if (o < 0 || uint(o) >= p.dst_bytes) continue;
    const int index = o >> 2;
    if (index != cached_index) {
      cached = output_value(uint(index));
      cached_index = index;
    }
    value |= ((cached >> (8u * (uint(o) & 3u))) & 0xffu) << (8u * b);
    mask |= 0xffu << (8u * b);
  }
  store_word(OP_DST, word, value, mask);
}

// Eight codes in column order to the repacked order 0,2,4,6,1,3,5,7 by two
// swaps: nibbles 1<->2 and 5<->6 (giving 0,2,1,3,4,6,5,7), then bytes
// 1<->2.
uint repack_codes(uint codes) {
  const uint t = (codes ^ (codes << 4)) & 0x0f000f00u;
  codes ^= t ^ (t >> 4);
  return bitfieldInsert(bitfieldInsert(codes, codes >> 16, 8, 8), codes >> 8, 16, 8);
}

void repack_packet(uint packet) {
  const uint n = row_of_packet(packet);
  const uint j = packet - n * (p.cols >> 5);  // columns 32j .. 32j + 31
  // A row of codes is k_blocks * block_size / 2 bytes: whole packets, since
  // K is a multiple of 32 (so a row of 16-column blocks has an even count).
  const uvec4 codes = ReadPackets(p.src).v[n * ((k_blocks() * p.block_size) >> 5) + j];
  Packets(p.dst).v[packet] = uvec4(repack_codes(codes.x), repack_codes(codes.y), repack_codes(codes.z), repack_codes(codes.w));
  // Blocks starting in these 32 columns: one for block_size >= 32 when the
  // packet starts a block, two for block_size 16.
  const uint first = 32u * j;
  [[dont_unroll]] for (uint start = (first + p.block_size - 1u) & ~(p.block_size - 1u); start < first + 32u; start += p.block_size) {
    const uint block = start >> block_shift();
    Words(p.dst2).w[n * k_blocks() + block] = pair_of(n, block);
  }
}

void main() {
  if (FAST == 1u) {
    if (packet_index() < p.total) repack_packet(packet_index());
  } else {
    run_words();
  }
}
