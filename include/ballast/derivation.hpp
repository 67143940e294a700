// The derived encodings every backend computes from source weights.
// Layouts, rounding and tolerances: docs/derivations.md.
#pragma once

#include <ballast/export.hpp>
#include <ballast/derivation_kinds.hpp>
#include <ballast/dtype.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <string_view>

BALLAST_API_BEGIN

namespace ballast {

// Device pointers are plain 64-bit addresses on every backend: CUDA/HIP
// device pointers, Vulkan buffer device addresses, host addresses on the CPU.
using DevicePtr = std::uint64_t;

// The name of a kind ("repack_int4"); "unknown" for a value outside the enum.
std::string_view derivation_name(Derivation d) noexcept;
bool derivation_yields_pair(Derivation d) noexcept;

// One kernel launch. Fields not used by `kind` stay zero.
struct DerivationLaunch {
  Derivation kind = Derivation::transpose;
  // transpose and slice: element type (size 1, 2, 4 or 8 bytes);
  // to_f16: float32 or bfloat16; quant_int8 (and _given_max): float32 or float16;
  // dequant_int4 / repack_int4: type of the scales (float32 or float16).
  DataType src_type = DataType::undefined;
  // transpose: [rows, cols] -> [cols, rows]; to_f16: rows*cols elements;
  // quant_int8 and int4: rows = N, cols = K; slice: the output's [rows, cols].
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::uint32_t block_size = 0;  // int4 only: power of two >= 16
  ZeroPoints zero_points = ZeroPoints::absent;
  // slice only: the source is [rows, src_cols] and the output takes its
  // columns [col_offset, col_offset + cols).
  std::uint64_t src_cols = 0;
  std::uint64_t col_offset = 0;

  DevicePtr src = 0;          // the weight (int4: B)
  DevicePtr scales = 0;       // int4; quant_int8_given_max: f32 [rows], each row's maximum
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

// One operand of a launch as the kind table lays it out: its element type,
// shape in elements (dense, row-major, outermost first) and byte size.
struct OperandLayout {
  bool present = false;  // the kind has this operand (with this zero-point form)
  DataType type = DataType::undefined;
  std::uint8_t rank = 0;
  std::uint64_t dims[3] = {};
  std::uint64_t bytes = 0;
  const kinds::Operand* row = nullptr;  // its row in kinds::kTable
};

// Every operand slot of a launch, indexed by kinds::Slot.
struct DerivationLayout {
  const kinds::Kind* kind = nullptr;
  OperandLayout operands[kinds::kSlotCount];
  const OperandLayout& operator[](kinds::Slot s) const { return operands[static_cast<int>(s)]; }
};

// Validates the shape/type fields of `launch` (not the pointers) against its
// kind's row and lays out every operand; the errors of derivation_sizes.
Result<DerivationLayout> derivation_layout(const DerivationLaunch& launch);

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
