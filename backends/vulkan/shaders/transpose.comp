#version 460
// transpose: [rows, cols] -> [cols, rows], elements of VARIANT bytes (1, 2,
// 4 or 8); bit-exact. Tiled through shared memory when the operands allow
// (p.mode 1, below); otherwise one invocation per 32-bit word of the output.
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

// ------------------------------------------------------------ tiled mode
// p.mode 1 (chosen by the host when both operands are word-aligned and
// every row of both matrices is a whole number of words): one 32 x 32
// element tile per workgroup. The tile's source words are read along rows
// (neighbouring invocations, neighbouring words), unpacked into shared
// memory one element per word (two for 8-byte elements; rows padded to 33
// elements against bank conflicts), and after a barrier the output words
// are packed from tile columns and written along output rows. Every index
// divisor is a power of two known at pipeline creation.
const uint TILE = 32u;
const uint EPW = VARIANT >= 4u ? 1u : 4u / VARIANT;         // elements per word
const uint WPE = VARIANT >= 4u ? VARIANT / 4u : 1u;          // words per element
const uint TILE_WORDS = TILE * VARIANT / 4u;                 // words of one tile row
const uint STRIDE = (TILE + 1u) * WPE;                       // shared words per tile row
shared uint tile[TILE * (TILE + 1u) * 2u];

// Source row and column of tile t's first element (tiles row-major).
uvec2 tile_origin(uint t) {
  const uint tiles_c = (p.cols + TILE - 1u) / TILE;
  const uint tr = t / tiles_c;
  return uvec2(tr * TILE, (t - tr * tiles_c) * TILE);
}

// Word x of tile row y into shared memory (element x / WPE, word x % WPE;
// or EPW elements), and word x of the tile's column y back out.
void tile_put(uint y, uint x, uint w) {
  if (VARIANT >= 4u) {
    tile[y * STRIDE + x] = w;
  } else {
    const uint elem_mask = (1u << (8u * VARIANT)) - 1u;
    for (uint j = 0u; j < EPW; ++j) tile[y * STRIDE + x * EPW + j] = (w >> (8u * VARIANT * j)) & elem_mask;
  }
}

uint tile_get(uint y, uint x) {
  if (VARIANT >= 4u) return tile[(x / WPE) * STRIDE + y * WPE + x % WPE];
  uint w = 0u;
  for (uint j = 0u; j < EPW; ++j) w |= tile[(x * EPW + j) * STRIDE + y] << (8u * VARIANT * j);
  return w;
}

void transpose_tile(uint t) {
  const uvec2 origin = tile_origin(t);
  const uint r0 = origin.x, c0 = origin.y;
  const uint src_row_words = p.cols * VARIANT / 4u, dst_row_words = p.rows * VARIANT / 4u;
  for (uint i = gl_LocalInvocationID.x; i < TILE * TILE_WORDS; i += gl_WorkGroupSize.x) {
    const uint y = i / TILE_WORDS, x = i % TILE_WORDS;
    const uint r = r0 + y, cw = c0 * VARIANT / 4u + x;
    if (r < p.rows && cw < src_row_words) tile_put(y, x, ReadWords(p.src).w[r * src_row_words + cw]);
  }
  barrier();
  for (uint i = gl_LocalInvocationID.x; i < TILE * TILE_WORDS; i += gl_WorkGroupSize.x) {
    const uint y = i / TILE_WORDS, x = i % TILE_WORDS;  // output row c0 + y, word x of its tile part
    const uint oc = c0 + y, ow = r0 * VARIANT / 4u + x;
    if (oc < p.cols && ow < dst_row_words) Words(p.dst).w[oc * dst_row_words + ow] = tile_get(y, x);
  }
}

// Packet tiles (the packet pipeline, FAST = 1, chosen when both operands
// are 16-byte aligned and every row of both matrices is whole 16-byte
// packets): the same tile and shared memory, moved as packets, so each
// invocation issues 16-byte loads and stores (of neighbouring packets).
const uint TILE_PACKETS = TILE * VARIANT / 16u;  // packets of one tile row: 2 (u8) .. 16 (u64)

void transpose_tile_packets(uint t) {
  const uvec2 origin = tile_origin(t);
  const uint r0 = origin.x, c0 = origin.y;
  const uint src_row_packets = p.cols * VARIANT / 16u, dst_row_packets = p.rows * VARIANT / 16u;
  for (uint i = gl_LocalInvocationID.x; i < TILE * TILE_PACKETS; i += gl_WorkGroupSize.x) {
    const uint y = i / TILE_PACKETS, x = i % TILE_PACKETS;
    const uint r = r0 + y, cp = c0 * VARIANT / 16u + x;
    if (r < p.rows && cp < src_row_packets) {
      const uvec4 v = ReadPackets(p.src).v[r * src_row_packets + cp];
      [[unroll]] for (uint k = 0u; k < 4u; ++k) tile_put(y, 4u * x + k, v[k]);
    }
  }
  barrier();
  for (uint i = gl_LocalInvocationID.x; i < TILE * TILE_PACKETS; i += gl_WorkGroupSize.x) {
    const uint y = i / TILE_PACKETS, x = i % TILE_PACKETS;  // output row c0 + y, packet x of its tile part
    const uint oc = c0 + y, op = r0 * VARIANT / 16u + x;
    if (oc < p.cols && op < dst_row_packets) {
      Packets(p.dst).v[oc * dst_row_packets + op] =
          uvec4(tile_get(y, 4u * x), tile_get(y, 4u * x + 1u), tile_get(y, 4u * x + 2u), tile_get(y, 4u * x + 3u));
    }
  }
}

void main() {
  if (p.mode == 1u) {
    if (FAST == 1u) {
      transpose_tile_packets(p.base + gl_WorkGroupID.x);
    } else {
      transpose_tile(p.base + gl_WorkGroupID.x);
    }
  } else {
    run_words();
  }
}
