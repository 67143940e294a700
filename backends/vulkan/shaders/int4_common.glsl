// MatMulNBits bits=4 operands, shared by dequant_int4 and repack_int4.
// VARIANT: scales (and unpacked zero points) are f32 (0) or f16 (1).

// block_size is a power of two (derivation_sizes() checks): shifts, not
// divisions.
uint block_shift() { return uint(findMSB(p.block_size)); }

uint k_blocks() { return (p.cols + p.block_size - 1u) >> block_shift(); }

// Column k of row n: byte k/2 of the row's bytes, low nibble for even k.
uint int4_code(uint n, uint k) {
  const uint row_bytes = k_blocks() * (p.block_size >> 1);
  const uint byte_ = read_u8(OP_SRC, n * row_bytes + (k >> 1));
  return (k & 1u) != 0u ? (byte_ >> 4) : (byte_ & 0xfu);
}

// A value of the scales' type as f32 bits. Packet pipelines read it at its
// natural alignment, which the host checks (no word straddling).
uint scale_type_bits(uint op, uint index) {
  if (FAST == 1u) {
    if (VARIANT == 0u) return load_word(op, index + (op_shift(op) >> 2));
    const uint b = op_shift(op) + 2u * index;
    return f32_bits_from_f16_bits((load_word(op, b >> 2) >> (8u * (b & 2u))) & 0xffffu);
  }
  return VARIANT == 0u ? read_u32(op, 4u * index) : f32_bits_from_f16_bits(read_u16(op, 2u * index));
}

uint scale_bits(uint n, uint block) { return scale_type_bits(OP_SCALES, n * k_blocks() + block); }

// The block's zero point as f32 bits.
uint zero_point_bits(uint n, uint block) {
  if (ZERO_POINTS == 0u) return floatBitsToUint(8.0);
  if (ZERO_POINTS == 1u) {
    // Byte block/2 of the row's zero points, high nibble for odd blocks: one shift.
    const uint b = op_shift(OP_ZP) + n * ((k_blocks() + 1u) >> 1) + (block >> 1);
    return floatBitsToUint(float((load_word(OP_ZP, b >> 2) >> (8u * (b & 3u) + 4u * (block & 1u))) & 0xfu));
  }
  return scale_type_bits(OP_ZP, n * k_blocks() + block);
}
