#version 460
// transpose: [rows, cols] -> [cols, rows], elements of VARIANT bytes (1, 2,
// 4 or 8); bit-exact. One invocation per 32-bit word of the output.
#include "common.glsl"

// Byte `o` of the output comes from this byte of the source.
uint source_offset(uint o) {
  const uint size = VARIANT;
  const uint e = o / size;
  const uint c = e / p.rows;  // output row = source column
  const uint r = e - c * p.rows;
  return (r * p.cols + c) * size + (o - e * size);
}

void process_word(uint word) {
  const int first = int(4u * word) - int(op_shift(OP_DST));  // output byte of the word's low byte
  const bool aligned = op_shift(OP_DST) == 0u && op_shift(OP_SRC) == 0u;
  if (aligned && VARIANT >= 4u && uint(first) + 4u <= p.dst_bytes) {
    // Four bytes of one source element, which is word-aligned too.
    store_word(OP_DST, word, read_u32(OP_SRC, source_offset(uint(first))), 0xffffffffu);
    return;
  }
  if (aligned && VARIANT == 2u && uint(first) + 4u <= p.dst_bytes) {
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
