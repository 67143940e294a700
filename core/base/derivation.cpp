#include <ballast/derivation.hpp>

#include "base/hex.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

namespace ballast {
namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

Error bad(std::string field, std::string why) {
  return make_error(ErrorCode::invalid_argument, field + ": " + why);
}

bool mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  if (b != 0 && a > kMax / b) return false;
  out = a * b;
  return true;
}

Error overflow(const char* what) { return make_error(ErrorCode::overflow, std::string(what) + " overflows 64 bits"); }

// ceil(a / b) for any a: (a + b - 1) / b wraps for K near 2^64 and then
// sized a huge matrix as empty (caught by fuzz_launch_validation's
// 128-bit model of these sizes).
std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

const char* slot_name(kinds::Slot s) {
  switch (s) {
    case kinds::Slot::src: return "src";
    case kinds::Slot::scales: return "scales";
    case kinds::Slot::zero_point: return "zero_point";
    case kinds::Slot::dst: return "dst";
    case kinds::Slot::dst2: return "dst2";
  }
  return "operand";
}

// The value of one extent for launch `l`; block_size is checked before
// any blocked extent is read, and src_type before a GGUF block's.
std::uint64_t extent(kinds::Extent e, const DerivationLaunch& l) {
  switch (e) {
    case kinds::Extent::rows: return l.rows;
    case kinds::Extent::cols: return l.cols;
    case kinds::Extent::k_blocks: return ceil_div(l.cols, l.block_size);
    case kinds::Extent::half_block: return l.block_size / 2;
    case kinds::Extent::packed_k_blocks: return ceil_div(ceil_div(l.cols, l.block_size), 2);
    case kinds::Extent::words: return ceil_div(l.cols, 8);
    case kinds::Extent::two: return 2;
    case kinds::Extent::blocks: return l.cols / kinds::gguf_block(l.src_type)->elements;
    case kinds::Extent::block_bytes: return kinds::gguf_block(l.src_type)->bytes;
    case kinds::Extent::src_cols: return l.src_cols;
  }
  return 0;
}

bool accepted(const kinds::Kind& k, DataType t) {
  if (k.type_count == 0) {
    const unsigned bits = dtype_bits(t);
    return bits == 8 || bits == 16 || bits == 32 || bits == 64;
  }
  for (int i = 0; i < k.type_count; ++i)
    if (k.types[i] == t) return true;
  return false;
}

Error refused_type(const kinds::Kind& k, DataType t) {
  const std::string got(dtype_name(t));
  if (k.type_count == 0)
    return make_error(ErrorCode::unsupported,
                      std::string(k.name) + ": " + k.type_role + " " + got + " is not 1, 2, 4 or 8 bytes wide");
  std::string list;
  for (int i = 0; i < k.type_count; ++i) list += (i == 0 ? "" : " or ") + std::string(dtype_name(k.types[i]));
  return make_error(ErrorCode::unsupported, std::string(k.name) + ": " + k.type_role + " must be " + list + ", not " + got);
}

}  // namespace

std::string_view derivation_name(Derivation d) noexcept {
  return is_known_derivation(static_cast<std::uint64_t>(d)) ? derivation_kind(d).name : "unknown";
}

bool derivation_yields_pair(Derivation d) noexcept {
  return is_known_derivation(static_cast<std::uint64_t>(d)) && derivation_kind(d).pair;
}

Result<DerivationLayout> derivation_layout(const DerivationLaunch& l) {
  if (!is_known_derivation(static_cast<std::uint64_t>(l.kind)))
    return bad("kind", "unknown derivation " + std::to_string(static_cast<int>(l.kind)));
  const kinds::Kind& k = derivation_kind(l.kind);
  DerivationLayout out;
  out.kind = &k;
  std::uint64_t elements = 0;
  if (!mul(l.rows, l.cols, elements)) return overflow("rows x cols");
  if (!accepted(k, l.src_type)) return refused_type(k, l.src_type);
  if (k.blocked) {
    const std::uint64_t bs = l.block_size;
    if (bs < 16 || (bs & (bs - 1)) != 0) return bad("block_size", "must be a power of two >= 16, got " + std::to_string(bs));
    if (l.rows == 0 || l.cols == 0) return bad("N and K", "must both be non-zero");
  }
  if (k.gguf_blocks) {
    const kinds::GgufBlock* b = kinds::gguf_block(l.src_type);  // accepted() listed it
    if (l.cols % b->elements != 0)
      return bad("cols", "must be a whole number of " + std::string(dtype_name(l.src_type)) + " blocks (" +
                             std::to_string(b->elements) + " elements), got " + std::to_string(l.cols));
  }
  if (k.column_slice) {
    if (l.col_offset > l.src_cols || l.cols > l.src_cols - l.col_offset)
      return bad("cols", "columns " + std::to_string(l.col_offset) + " + " + std::to_string(l.cols) +
                             " pass the source's " + std::to_string(l.src_cols));
    std::uint64_t source = 0;
    if (!mul(l.rows, l.src_cols, source)) return overflow("rows x src_cols");
  }
  if (k.blocked && l.zero_points != ZeroPoints::absent && l.zero_points != ZeroPoints::packed_u4 &&
      l.zero_points != ZeroPoints::unpacked)
    return bad("zero_points", "unknown form");
  for (int i = 0; i < k.operand_count; ++i) {
    const kinds::Operand& row = k.operands[i];
    if (!kinds::present(k, row, l.zero_points)) continue;
    OperandLayout& o = out.operands[static_cast<int>(row.slot)];
    o.present = true;
    o.row = &row;
    o.type = row.launch_type ? l.src_type : row.type;
    o.rank = row.rank;
    std::uint64_t bytes = std::max(1u, dtype_bits(o.type) / 8);
    for (int d = 0; d < row.rank; ++d) {
      o.dims[d] = extent(row.shape[d], l);
      if (!mul(bytes, o.dims[d], bytes))
        return make_error(ErrorCode::overflow, std::string(k.name) + " " + slot_name(row.slot) + " bytes overflow 64 bits");
    }
    o.bytes = bytes;
  }
  return out;
}

Result<DerivationSizes> derivation_sizes(const DerivationLaunch& l) {
  BALLAST_ASSIGN_OR_RETURN(const DerivationLayout layout, derivation_layout(l));
  DerivationSizes s;
  s.src_bytes = layout[kinds::Slot::src].bytes;
  s.scales_bytes = layout[kinds::Slot::scales].bytes;
  s.zero_point_bytes = layout[kinds::Slot::zero_point].bytes;
  s.dst_bytes = layout[kinds::Slot::dst].bytes;
  s.dst2_bytes = layout[kinds::Slot::dst2].bytes;
  return s;
}

Status check_operand_alignment(const DerivationLaunch& l) {
  if (!is_known_derivation(static_cast<std::uint64_t>(l.kind))) return Status();  // derivation_sizes names it
  const kinds::Kind& k = derivation_kind(l.kind);
  const DevicePtr ptrs[kinds::kSlotCount] = {l.src, l.scales, l.zero_point, l.dst, l.dst2};
  for (int i = 0; i < k.operand_count; ++i) {
    const kinds::Operand& row = k.operands[i];
    if (!kinds::present(k, row, l.zero_points)) continue;
    const std::uint64_t align = derivation_operand_alignment(row.launch_type ? l.src_type : row.type);
    const DevicePtr ptr = ptrs[static_cast<int>(row.slot)];
    if (align <= 1 || ptr % align == 0) continue;
    return make_error(ErrorCode::invalid_argument, std::string(slot_name(row.slot)) + ": device pointer " + hex(ptr) +
                                                       " is not aligned to its " + std::to_string(align) + "-byte elements");
  }
  return Status();
}

}  // namespace ballast
