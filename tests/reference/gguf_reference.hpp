// The GGUF kinds of the scalar reference (gguf_reference.cpp); derive()
// calls it after checking the operands' sizes.
#pragma once

#include <reference/reference.hpp>

namespace ballast::reference {

// dequant_gguf (f16) and dequant_gguf_f32 of a launch derivation_sizes()
// accepted, into out.dst (already sized).
void dequant_gguf(const DerivationLaunch& shape, const Inputs& in, Outputs& out);
// repack_gguf_int4: words into out.dst, (scale, offset) pairs into out.dst2.
void repack_gguf_int4(const DerivationLaunch& shape, const Inputs& in, Outputs& out);

}  // namespace ballast::reference
