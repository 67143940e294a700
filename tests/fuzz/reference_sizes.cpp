#include "fuzz/reference_sizes.hpp"

#include <ballast/dtype.hpp>

namespace fuzz {
namespace {

using ballast::DataType;
using ballast::Derivation;
using ballast::ZeroPoints;

u128 ceil_div(u128 a, u128 b) { return (a + b - 1) / b; }

}  // namespace

std::optional<Sizes> reference_sizes(const ballast::DerivationLaunch& l) {
  const u128 rows = l.rows, cols = l.cols, elements = rows * cols;
  if (elements > kMax64) return std::nullopt;  // a [rows, cols] matrix must be countable
  const unsigned bits = ballast::dtype_bits(l.src_type);
  const u128 width = bits / 8;
  Sizes s;
  switch (l.kind) {
    case Derivation::transpose:
      if (bits != 8 && bits != 16 && bits != 32 && bits != 64) return std::nullopt;
      s.src = s.dst = elements * width;
      break;
    case Derivation::to_f16:
      if (l.src_type != DataType::float32 && l.src_type != DataType::bfloat16) return std::nullopt;
      s.src = elements * width;
      s.dst = elements * 2;
      break;
    case Derivation::quant_int8:
      if (l.src_type != DataType::float32 && l.src_type != DataType::float16) return std::nullopt;
      s.src = elements * width;
      s.dst = elements;
      s.dst2 = rows * 4;
      break;
    case Derivation::dequant_int4:
    case Derivation::repack_int4: {
      if (l.src_type != DataType::float32 && l.src_type != DataType::float16) return std::nullopt;
      const u128 bs = l.block_size;
      if (bs < 16 || (bs & (bs - 1)) != 0) return std::nullopt;
      if (rows == 0 || cols == 0) return std::nullopt;
      const u128 blocks = rows * ceil_div(cols, bs);
      s.src = blocks * (bs / 2);
      s.scales = blocks * width;
      switch (l.zero_points) {
        case ZeroPoints::absent: break;
        case ZeroPoints::packed_u4: s.zero_point = rows * ceil_div(ceil_div(cols, bs), 2); break;
        case ZeroPoints::unpacked: s.zero_point = blocks * width; break;
        default: return std::nullopt;
      }
      if (l.kind == Derivation::dequant_int4) {
        s.dst = elements * 2;
      } else {
        s.dst = rows * ceil_div(cols, 8) * 4;
        s.dst2 = blocks * 4;
      }
      break;
    }
    default: return std::nullopt;
  }
  for (u128 v : {s.src, s.scales, s.zero_point, s.dst, s.dst2})
    if (v > kMax64) return std::nullopt;
  return s;
}


}  // namespace fuzz
