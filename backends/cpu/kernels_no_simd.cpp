// Architectures without a hand-vectorised table use the portable kernels
// (which the compiler still auto-vectorises).
#include "kernels.hpp"

namespace ballast::cpu {

const RowKernels* simd_kernels() { return nullptr; }
const RowKernels* simd512_kernels() { return nullptr; }

}  // namespace ballast::cpu
