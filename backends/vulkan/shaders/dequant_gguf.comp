#version 460
// dequant_gguf: GGUF blocks (VARIANT: the block type) to f16 [rows, cols],
// each element computed in f32 exactly as the CPU does (gguf_common.glsl)
// and rounded once to f16 by integer logic. One invocation per 32-bit word
// of the output, so every output word has exactly one writer; in an aligned
// output a word is two elements of one scale group for the quantized types
// (groups of 16 or 32 elements start at even ones), which share its scale.
#include "common.glsl"

const uint OUT_BYTES = 2u;
#include "gguf_common.glsl"

uint out_of_bits(uint f32_bits) { return f16_bits_from_f32_bits(f32_bits); }

void main() { run_words(); }
