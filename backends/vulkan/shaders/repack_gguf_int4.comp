#version 460
// repack_gguf_int4: GGUF Q4_0 / Q4_1 blocks (VARIANT: the block type,
// 2002 or 2003) as stored, to repack_int4's outputs; a port of
// backends/common/gguf_blocks.hpp's q4_repack_word and q4_repack_pair.
// Two passes selected by p.mode, as repack_int4's word pipeline:
//  0: words [rows, cols/8]: word j (0..3) of a block holds its columns
//     8j..8j+7, nibble i column 8j + (0,2,4,6,1,3,5,7)[i];
//  1: pairs [rows, cols/32] of f16 (scale, offset), scale in the low half:
//     Q4_0 (d, -(d * 8)) (repack_scale_pair(d, 8)), Q4_1 (d, m).
// cols is a multiple of 32, so blocks run on across rows: word w is word
// w & 3 of block w >> 2, pair b is block b's. One invocation per 32-bit
// word of the output being written; outputs are 32-bit values, so an
// unaligned destination (dst2 is only 2-byte aligned in general) splits
// them across words, stored through store_word's mask. Blocks (18 or 20
// bytes) sit at 2-byte boundaries: read with common.glsl's byte readers.
// No packet pipeline.
#include "common.glsl"

#define GGUF_BLOCKS_ONLY
#include "gguf_common.glsl"

// Where the 16 bytes of codes start in a block (gguf_blocks.hpp's
// q4_codes_at): after d (Q4_0), or d and m (Q4_1).
uint q4_codes_at() { return VARIANT == GGUF_Q4_0 ? 2u : 4u; }

// q4_repack_word: codes[c] = low_high_code(b, at, 8j + c), c = 0..7, i.e.
// the low nibbles of bytes at + 8j + c for j < 2 and the high nibbles of
// bytes at + 8(j - 2) + c for j >= 2, in repack_word's nibble order.
uint q4_repack_word(uint b, uint j) {
  const uint at = b + q4_codes_at() + 8u * (j & 1u);
  const uint h = 4u * (j >> 1);
  const uint lo = read_u32(OP_SRC, at), hi = read_u32(OP_SRC, at + 4u);
  uint word = 0u;
  for (uint c = 0u; c < 8u; ++c) {
    const uint byte_ = ((c < 4u ? lo : hi) >> (8u * (c & 3u))) & 0xffu;
    const uint code = (byte_ >> h) & 15u;
    word |= code << (4u * ((c >> 1) | ((c & 1u) << 2)));
  }
  return word;
}

// f16 bits through f32 and back, as the CPU's f16_bits_from_f32(f16_at(..))
// (a signalling NaN comes back quiet).
uint f16_round_trip(uint h) { return f16_bits_from_f32_bits(f32_bits_from_f16_bits(h)); }

// q4_repack_pair. Q4_0's offset -(d * 8): d is an f16 value, so a normal
// f32 (or zero, inf, NaN) and the product is exact; `precise` forbids any
// rewrite. A NaN d passes with its payload and the sign flipped, as the
// CPU's multiply and negation leave it (a GPU may return a canonical NaN).
uint q4_repack_pair(uint b) {
  const uint d_half = read_u16(OP_SRC, b);
  const uint scale = f16_round_trip(d_half);
  if (VARIANT == GGUF_Q4_1) return scale | (f16_round_trip(read_u16(OP_SRC, b + 2u)) << 16);
  const uint d = f32_bits_from_f16_bits(d_half);
  uint offset;
  if (is_nan_bits(d)) {
    offset = d ^ 0x80000000u;
  } else {
    precise float o = -(uintBitsToFloat(d) * 8.0);
    offset = floatBitsToUint(o);
  }
  return scale | (f16_bits_from_f32_bits(offset) << 16);
}

uint output_value(uint index) {
  if (p.mode == 0u) return q4_repack_word((index >> 2) * gguf_block_bytes(), index & 3u);
  return q4_repack_pair(index * gguf_block_bytes());
}

// As repack_int4.comp's process_word: a whole value per aligned word, else
// the bytes of the (at most two) values a word straddles, masked.
void process_word(uint word) {
  const uint shift = op_shift(OP_DST);
  const int first = int(4u * word) - int(shift);
  if (shift == 0u) {
    store_word(OP_DST, word, output_value(word), 0xffffffffu);
    return;
  }
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

void main() { run_words(); }
