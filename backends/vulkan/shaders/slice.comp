#version 460
// slice: columns [col_offset, col_offset + cols) of every row of a
// [rows, src_cols] source of VARIANT-byte elements (1, 2, 4 or 8), dense;
// bit-exact. A strided shard gathered on the device (issue 29). The word
// pipeline only: one invocation per 32-bit word of the output, whose bytes
// are runs of source rows, read a word at a time where an element holds
// the whole output word (read_u32 joins two source words when the run
// starts off a word boundary).
#include "common.glsl"

// Byte `o` of the output comes from this byte of the source.
uint source_offset(uint o) {
  const uint size = VARIANT;
  const uint e = o / size;
  const uint r = e / p.cols;
  const uint c = e - r * p.cols;
  return (r * p.src_cols + p.col_offset + c) * size + (o - e * size);
}

void process_word(uint word) {
  const int first = int(4u * word) - int(op_shift(OP_DST));  // output byte of the word's low byte
  if (op_shift(OP_DST) == 0u && VARIANT >= 4u && uint(first) + 4u <= p.dst_bytes) {
    // Four bytes of one element: contiguous in the source too.
    store_word(OP_DST, word, read_u32(OP_SRC, source_offset(uint(first))), 0xffffffffu);
    return;
  }
  if (op_shift(OP_DST) == 0u && VARIANT == 2u && uint(first) + 4u <= p.dst_bytes) {
    const uint lo = read_u16(OP_SRC, source_offset(uint(first)));
    const uint hi = read_u16(OP_SRC, source_offset(uint(first) + 2u));
    store_word(OP_DST, word, lo | (hi << 16), 0xffffffffu);
    return;
  }
  uint value = 0u, mask = 0u;
  for (uint b = 0u; b < 4u; ++b) {
    const int o = first + int(b);
    if (o < 0 || uint(o) >= p.dst_bytes) continue;
    value |= read_u8(OP_SRC, source_offset(uint(o))) << (8u * b);
    mask |= 0xffu << (8u * b);
  }
  store_word(OP_DST, word, value, mask);
}

void main() { run_words(); }
