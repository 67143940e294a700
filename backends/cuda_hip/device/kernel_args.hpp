// The boundary between a plugin's host code (compiled by the C++ compiler
// that built libballast) and its kernel object (compiled by nvcc or hipcc).
// Plain data only, so both compilers agree on the layout; the one ballast
// header shared is the kind table's (plain constexpr data).
#pragma once

#include <ballast/derivation_kinds.hpp>

#include <cstdint>

namespace ballast::gpu {

// Numbered as ballast::DataType; the host side static_asserts the
// correspondence. The GGUF block types are the dequant_gguf and
// repack_gguf_int4 kinds' src_type (numbered as kmath::gguf::Type too,
// which derivation_elements.hpp checks).
enum class KernelType : std::uint32_t {
  float32 = 1,
  uint8 = 2,
  float16 = 10,
  bfloat16 = 16,
  q4_0 = 2002,
  q4_1 = 2003,
  q5_0 = 2006,
  q5_1 = 2007,
  q8_0 = 2008,
  q2_k = 2010,
  q3_k = 2011,
  q4_k = 2012,
  q5_k = 2013,
  q6_k = 2014,
  q8_k = 2015,
};

// One launch that the host side has already validated: every pointer
// covers its operand's full size, shapes are consistent.
struct KernelArgs {
  Derivation kind = Derivation::transpose;
  KernelType src_type = KernelType::float32;  // to_f16 / quant_int8 source, int4 scales, GGUF block type
  std::uint32_t element_bytes = 0;           // transpose and slice: 1, 2, 4 or 8
  std::uint32_t block_size = 0;
  ZeroPoints zero_points = ZeroPoints::absent;
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::uint64_t src = 0;
  std::uint64_t scales = 0;
  std::uint64_t zero_point = 0;
  std::uint64_t dst = 0;
  std::uint64_t dst2 = 0;
  std::uint64_t src_cols = 0;    // slice
  std::uint64_t col_offset = 0;  // slice
};

// Enqueues the kernels of one derivation on `stream` (a cudaStream_t or
// hipStream_t) and returns the vendor's error code for the enqueue (0 is
// success on both vendors). Errors raised while the kernels run surface at
// the next synchronisation.
int enqueue_derivation(const KernelArgs& args, void* stream);

}  // namespace ballast::gpu
