// The derived encodings every backend computes from source weights.
// Layouts, rounding and tolerances: docs/derivations.md.
#pragma once

#include <ballast/export.hpp>
#include <ballast/dtype.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <string_view>

BALLAST_API_BEGIN

namespace ballast {

// Device pointers are plain 64-bit addresses on every backend: CUDA/HIP
// device pointers, Vulkan buffer device addresses, host addresses on the CPU.
using DevicePtr = std::uint64_t;

enum class Derivation : std::uint8_t {
  transpose = 0,     // -> one pointer
  to_f16 = 1,        // -> one pointer
  dequant_int4 = 2,  // -> one pointer
  repack_int4 = 3,   // -> a pair (words, scale/offset pairs)
  quant_int8 = 4,    // -> a pair (codes, scales)
};
inline constexpr int kDerivationCount = 5;

std::string_view derivation_name(Derivation d) noexcept;
bool derivation_yields_pair(Derivation d) noexcept;

// How MatMulNBits zero points are given.
enum class ZeroPoints : std::uint8_t {
  absent = 0,     // default 8
  packed_u4 = 1,  // uint8 [N, ceil(k_blocks/2)], low nibble first
  unpacked = 2,   // [N, k_blocks] of the scales' type
};

// One kernel launch. Fields not used by `kind` stay zero.
struct DerivationLaunch {
  Derivation kind = Derivation::transpose;
  // transpose: element type (size 1, 2, 4 or 8 bytes);
  // to_f16: float32 or bfloat16; quant_int8: float32 or float16;
  // dequant_int4 / repack_int4: type of the scales (float32 or float16).
  DataType src_type = DataType::undefined;
  // transpose: [rows, cols] -> [cols, rows]; to_f16: rows*cols elements;
  // quant_int8 and int4: rows = N, cols = K.
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::uint32_t block_size = 0;  // int4 only: power of two >= 16
  ZeroPoints zero_points = ZeroPoints::absent;

  DevicePtr src = 0;          // the weight (int4: B)
  DevicePtr scales = 0;       // int4 only
  DevicePtr zero_point = 0;   // int4 with zero points only
  DevicePtr dst = 0;          // first (or only) output
  DevicePtr dst2 = 0;         // second output of pair derivations
};

// Sizes implied by a launch; computed here so every backend and caller agree.
struct DerivationSizes {
  std::uint64_t src_bytes = 0;
  std::uint64_t scales_bytes = 0;
  std::uint64_t zero_point_bytes = 0;
  std::uint64_t dst_bytes = 0;
  std::uint64_t dst2_bytes = 0;
};

// Validates the shape/type fields of `launch` (not the pointers) and returns
// the byte sizes of every operand; invalid_argument/unsupported/overflow
// errors say which field is wrong. Whether pointers lie inside live
// allocations is the backend's check.
Result<DerivationSizes> derivation_sizes(const DerivationLaunch& launch);

// For backends whose kernels read whole, naturally aligned elements (CPU,
// CUDA, HIP; see Capabilities::unaligned_operands): each non-zero operand
// pointer must be a multiple of its element size. invalid_argument names
// the operand otherwise.
Status check_operand_alignment(const DerivationLaunch& launch);

// The alignment a source weight of type `t` needs to be read in place by
// such a kernel: its element size (1 for sub-byte types).
inline std::uint64_t derivation_operand_alignment(DataType t) {
  const unsigned bits = dtype_bits(t);
  return bits >= 8 ? bits / 8 : 1;
}

inline std::uint64_t k_blocks(std::uint64_t k, std::uint64_t block_size) {
  return (k + block_size - 1) / block_size;
}

}  // namespace ballast

BALLAST_API_END
