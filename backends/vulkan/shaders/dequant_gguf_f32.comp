#version 460
// dequant_gguf_f32: GGUF blocks (VARIANT: the block type) to f32 [rows,
// cols], the f32 of gguf_common.glsl stored as is. One invocation per
// 32-bit word of the output: one element, or the parts of two where the
// output starts off a word boundary.
#include "common.glsl"

const uint OUT_BYTES = 4u;
#include "gguf_common.glsl"

uint out_of_bits(uint f32_bits) { return f32_bits; }

void main() { run_words(); }
