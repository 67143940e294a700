#include "fuzz/reference_sizes.hpp"

#include <ballast/dtype.hpp>

namespace fuzz {
namespace {

using ballast::DataType;
using ballast::Derivation;
using ballast::ZeroPoints;

u128 ceil_div(u128 a, u128 b) { return (a + b - 1) / b; }

}  // namespace

// The kind's row of derivation_kinds.hpp evaluated in 128 bits, where no
// product of two 64-bit factors can wrap: each size is the product of its
// extents and its element size, and is refused past 64 bits.
std::optional<Sizes> reference_sizes(const ballast::DerivationLaunch& l) {
  if (!ballast::is_known_derivation(static_cast<std::uint64_t>(l.kind))) return std::nullopt;
  const ballast::kinds::Kind& k = ballast::derivation_kind(l.kind);
  const u128 rows = l.rows, cols = l.cols;
  if (rows * cols > kMax64) return std::nullopt;  // a [rows, cols] matrix must be countable
  const unsigned bits = ballast::dtype_bits(l.src_type);
  bool type_ok = false;
  if (k.type_count == 0) type_ok = bits == 8 || bits == 16 || bits == 32 || bits == 64;
  for (int i = 0; i < k.type_count; ++i) type_ok = type_ok || k.types[i] == l.src_type;
  if (!type_ok) return std::nullopt;
  const u128 bs = l.block_size;
  if (k.blocked) {
    if (bs < 16 || (bs & (bs - 1)) != 0) return std::nullopt;
    if (rows == 0 || cols == 0) return std::nullopt;
    if (l.zero_points != ZeroPoints::absent && l.zero_points != ZeroPoints::packed_u4 &&
        l.zero_points != ZeroPoints::unpacked)
      return std::nullopt;
  }
  // GGUF kinds: cols a whole number of the type's blocks (kGgufBlocks).
  const ballast::kinds::GgufBlock* block = ballast::kinds::gguf_block(l.src_type);
  if (k.gguf_blocks && (block == nullptr || cols % block->elements != 0)) return std::nullopt;
  // slice: the columns taken lie in the source's row.
  const u128 src_cols = l.src_cols, col_offset = l.col_offset;
  if (k.column_slice && col_offset + cols > src_cols) return std::nullopt;
  const auto extent = [&](ballast::kinds::Extent e) -> u128 {
    using ballast::kinds::Extent;
    switch (e) {
      case Extent::rows: return rows;
      case Extent::cols: return cols;
      case Extent::k_blocks: return ceil_div(cols, bs);
      case Extent::half_block: return bs / 2;
      case Extent::packed_k_blocks: return ceil_div(ceil_div(cols, bs), 2);
      case Extent::words: return ceil_div(cols, 8);
      case Extent::two: return 2;
      case Extent::blocks: return cols / block->elements;
      case Extent::block_bytes: return block->bytes;
      case Extent::src_cols: return src_cols;
    }
    return 0;
  };
  Sizes s;
  u128* slots[] = {&s.src, &s.scales, &s.zero_point, &s.dst, &s.dst2};
  for (int i = 0; i < k.operand_count; ++i) {
    const ballast::kinds::Operand& o = k.operands[i];
    if (!ballast::kinds::present(k, o, l.zero_points)) continue;
    // Factors are each below 2^64, so two multiply without wrapping; stop
    // as soon as a partial product passes 64 bits.
    u128 bytes = ballast::dtype_bits(o.launch_type ? l.src_type : o.type) / 8;
    for (int d = 0; d < o.rank; ++d) {
      bytes *= extent(o.shape[d]);
      if (bytes > kMax64) return std::nullopt;
    }
    *slots[static_cast<int>(o.slot)] = bytes;
  }
  return s;
}

}  // namespace fuzz
