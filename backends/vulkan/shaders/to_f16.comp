#version 460
// to_f16: f32 (VARIANT 0) or bf16 (VARIANT 1) to f16, round to nearest
// even by integer logic (no driver conversion, no subnormal flushing).
// Packet pipeline: one invocation per 16-byte packet of the output (eight
// f16 from one or two source packets); general pipeline: one invocation
// per 32-bit word of the output.
#include "common.glsl"

uint f16_of(uint e) {
  const uint bits = VARIANT == 0u ? read_u32(OP_SRC, 4u * e) : read_u16(OP_SRC, 2u * e) << 16;
  return f16_bits_from_f32_bits(bits);
}

void process_word(uint word) {
  const int first = int(4u * word) - int(op_shift(OP_DST));
  if (op_shift(OP_DST) == 0u && uint(first) + 4u <= p.dst_bytes) {
    const uint e = uint(first) >> 1;
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

void to_f16_packet(uint packet) {
  uvec4 a, b;
  if (VARIANT == 0u) {
    a = ReadPackets(p.src).v[2u * packet];
    b = ReadPackets(p.src).v[2u * packet + 1u];
  } else {
    // A bf16 is the top half of the f32 it stands for.
    const uvec4 s = ReadPackets(p.src).v[packet];
    a = uvec4(s.x << 16, s.x & 0xffff0000u, s.y << 16, s.y & 0xffff0000u);
    b = uvec4(s.z << 16, s.z & 0xffff0000u, s.w << 16, s.w & 0xffff0000u);
  }
  if (all_f16_fast(a) && all_f16_fast(b)) {
    Packets(p.dst).v[packet] = f16_packet_fast(a, b);
    return;
  }
  [[dont_unroll]] for (uint i = 0u; i < 4u; ++i) process_word(4u * packet + i);
}

void main() {
  if (FAST == 1u) {
    if (packet_index() < p.total) to_f16_packet(packet_index());
  } else {
    run_words();
  }
}
