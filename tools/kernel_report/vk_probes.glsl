// Vulkan probe entry points for tools/kernel-report: each runs one work
// unit of one shader's path, with no loop around it, so RADV's static
// instruction count is the count per unit. The report compiles the shader
// (backends/vulkan/shaders/SHADER.comp with its main cut off) followed by
// one section below, with every operand word-aligned (op_shift returns 0)
// and the specialization constants of the header line. Word probes call
// only functions the shaders had before issue 14 too, so `--rev 6a91fdd`
// gives their baseline.
//
//   // PROBE NAME SHADER VARIANT ZERO_POINTS FAST BYTES_WRITTEN
//
// "packet" probes are the packet pipelines' fast path (no fallback for
// special values or near-half quotients: they run for few packets, as in
// the CUDA probes); "word" probes are the same 16 bytes through the word
// pipeline, the only path before the packet pipelines: four aligned,
// whole words (the first branch of each process_word). The int4 probes
// take the bench case's zero-point form.

// PROBE to_f16/f32/packet to_f16 0 0 1 16
void main() {
  const uint packet = gl_GlobalInvocationID.x;
  const uvec4 a = ReadPackets(p.src).v[2u * packet], b = ReadPackets(p.src).v[2u * packet + 1u];
  if (all_f16_fast(a) && all_f16_fast(b)) Packets(p.dst).v[packet] = f16_packet_fast(a, b);
}

// PROBE to_f16/f32/word to_f16 0 0 0 16
void unit(uint word) { store_word(OP_DST, word, f16_of(2u * word) | (f16_of(2u * word + 1u) << 16), 0xffffffffu); }
void main() {
  // Four calls, not a loop: a loop body too large for the driver to unroll would be counted once.
  const uint w = 4u * gl_GlobalInvocationID.x;
  unit(w);
  unit(w + 1u);
  unit(w + 2u);
  unit(w + 3u);
}

// PROBE dequant_int4/f32/zp1/packet dequant_int4 0 1 1 16
void main() {
  const uint packet = gl_GlobalInvocationID.x;
  const uint n = row_of_packet(packet);
  const uint k = (packet - n * (p.cols >> 3)) << 3;
  const uint block = k >> block_shift();
  const uint codes = ReadWords(p.src).w[n * (k_blocks() * (p.block_size >> 3)) + (k >> 3)];
  const uint zp = zero_point_bits(n, block), scale = scale_bits(n, block);
  if (!is_subnormal_bits(zp)) {
    const uvec4 q_lo = uvec4(codes, codes >> 4, codes >> 8, codes >> 12) & 0xfu;
    const uvec4 q_hi = uvec4(codes >> 16, codes >> 20, codes >> 24, codes >> 28) & 0xfu;
    precise vec4 lo = (vec4(q_lo) - uintBitsToFloat(zp)) * uintBitsToFloat(scale);
    precise vec4 hi = (vec4(q_hi) - uintBitsToFloat(zp)) * uintBitsToFloat(scale);
    const uvec4 a = floatBitsToUint(lo), b = floatBitsToUint(hi);
    if (all_f16_fast(a) && all_f16_fast(b)) Packets(p.dst).v[packet] = f16_packet_fast(a, b);
  }
}

// PROBE dequant_int4/f32/zp1/word dequant_int4 0 1 0 16
void unit(uint word) { store_word(OP_DST, word, f16_of(2u * word) | (f16_of(2u * word + 1u) << 16), 0xffffffffu); }
void main() {
  const uint w = 4u * gl_GlobalInvocationID.x;
  unit(w);
  unit(w + 1u);
  unit(w + 2u);
  unit(w + 3u);
}

// PROBE repack_int4/f32/zp1/packet repack_int4 0 1 1 20
void main() {
  const uint packet = gl_GlobalInvocationID.x;
  const uint n = row_of_packet(packet);
  const uint j = packet - n * (p.cols >> 5);
  const uvec4 codes = ReadPackets(p.src).v[n * ((k_blocks() * p.block_size) >> 5) + j];
  Packets(p.dst).v[packet] = uvec4(repack_codes(codes.x), repack_codes(codes.y), repack_codes(codes.z), repack_codes(codes.w));
  // The bench case's block size is 32: one pair per packet.
  const uint block = (32u * j) >> block_shift();
  const uvec2 pair = pair_values(n, block);
  if (f16_fast(pair.x) && f16_fast(pair.y))
    Words(p.dst2).w[n * k_blocks() + block] = f16_bits_fast(pair.x) | (f16_bits_fast(pair.y) << 16);
}

// PROBE repack_int4/f32/zp1/word repack_int4 0 1 0 20
void unit(uint index) {
  const uint per_row = (p.cols + 7u) >> 3;
  const uint n = index / per_row;
  const uint j = index - n * per_row;
  const uint codes = load_word(OP_SRC, n * (k_blocks() * (p.block_size >> 3)) + j);
  uint word = 0u;
  for (uint c = 0u; c < 8u; ++c) word |= ((codes >> (4u * c)) & 0xfu) << (4u * ((c >> 1) | ((c & 1u) << 2)));
  store_word(OP_DST, index, word, 0xffffffffu);
}
void main() {
  // Four words, and the pair those 32 columns carry (the pairs pass: one word per 32-column block).
  const uint w = 4u * gl_GlobalInvocationID.x;
  unit(w);
  unit(w + 1u);
  unit(w + 2u);
  unit(w + 3u);
  store_word(OP_DST2, gl_GlobalInvocationID.x, scale_pair(gl_GlobalInvocationID.x), 0xffffffffu);
}

// PROBE quant_int8/f16/packet quant_int8 1 0 1 16
void main() {
  // One slab of a row through both passes (the row maximum's reduction and
  // the scale are per row, outside the unit).
  const uint row = gl_WorkGroupID.x, s = gl_LocalInvocationID.x;
  atomicMax(row_max_bits, slab_max_magnitude(row, s));
  barrier();
  const float inv = 1.0 / uintBitsToFloat(row_max_bits);
  vec4 v[4];
  load_slab(row, s, v);
  bool exact = true;
  const uvec4 codes = uvec4(codes_of(v[0], inv, exact), codes_of(v[1], inv, exact), codes_of(v[2], inv, exact),
                            codes_of(v[3], inv, exact));
  if (exact) Packets(p.dst).v[row * (p.cols >> 4) + s] = codes;
}

// PROBE quant_int8/f16/word quant_int8 1 0 0 16
uint max_unit(uint row, uint k, uint m) {
  const uint a = element_bits(row, k) & 0x7fffffffu;
  return a <= 0x7f800000u && a > m ? a : m;
}
uint code_unit(uint row, uint k, uint scale) { return uint(code_of(element_bits(row, k), scale)) & 0xffu; }
uint word_unit(uint row, uint k, uint scale) {
  return code_unit(row, k, scale) | (code_unit(row, k + 1u, scale) << 8) | (code_unit(row, k + 2u, scale) << 16) |
         (code_unit(row, k + 3u, scale) << 24);
}
void main() {
  // 16 elements through the max pass and the codes pass, as calls, not loops.
  const uint row = gl_WorkGroupID.x, k0 = 16u * gl_LocalInvocationID.x;
  uint m = 0u;
  m = max_unit(row, k0, m); m = max_unit(row, k0 + 1u, m); m = max_unit(row, k0 + 2u, m); m = max_unit(row, k0 + 3u, m);
  m = max_unit(row, k0 + 4u, m); m = max_unit(row, k0 + 5u, m); m = max_unit(row, k0 + 6u, m); m = max_unit(row, k0 + 7u, m);
  m = max_unit(row, k0 + 8u, m); m = max_unit(row, k0 + 9u, m); m = max_unit(row, k0 + 10u, m); m = max_unit(row, k0 + 11u, m);
  m = max_unit(row, k0 + 12u, m); m = max_unit(row, k0 + 13u, m); m = max_unit(row, k0 + 14u, m); m = max_unit(row, k0 + 15u, m);
  atomicMax(row_max_bits, m);
  barrier();
  const uint scale = row_max_bits, first = (row * p.cols + k0) / 4u;
  store_word(OP_DST, first, word_unit(row, k0, scale), 0xffffffffu);
  store_word(OP_DST, first + 1u, word_unit(row, k0 + 4u, scale), 0xffffffffu);
  store_word(OP_DST, first + 2u, word_unit(row, k0 + 8u, scale), 0xffffffffu);
  store_word(OP_DST, first + 3u, word_unit(row, k0 + 12u, scale), 0xffffffffu);
}
