#version 460
// dequant_gguf: GGUF blocks (VARIANT: the block type) to f16 [rows, cols],
// each element computed in f32 exactly as the CPU does (gguf_common.glsl)
// and rounded once to f16 by integer logic. One invocation per 32-bit word
// of the output (two elements of one block: cols is a whole number of
// blocks of 1, 32 or 256 elements, so an even element starts each word of
// an aligned output), so every output word has exactly one writer.
#include "common.glsl"

const uint OUT_BYTES = 2u;
#include "gguf_common.glsl"

uint out_bits(uint e) { return f16_bits_from_f32_bits(gguf_element_bits(e)); }

void main() { run_words(); }
