#include <ballast/derivation.hpp>

#include "base/hex.hpp"

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

}  // namespace

Status check_operand_alignment(const DerivationLaunch& l) {
  struct Operand {
    const char* name;
    DevicePtr ptr;
    std::uint64_t align;
  };
  const std::uint64_t scale = derivation_operand_alignment(l.src_type);
  Operand ops[5] = {};
  switch (l.kind) {
    case Derivation::transpose:
      ops[0] = {"src", l.src, scale};
      ops[1] = {"dst", l.dst, scale};
      break;
    case Derivation::to_f16:
      ops[0] = {"src", l.src, scale};
      ops[1] = {"dst", l.dst, 2};
      break;
    case Derivation::quant_int8:
      ops[0] = {"src", l.src, scale};
      ops[1] = {"dst2", l.dst2, 4};
      break;
    case Derivation::dequant_int4:
    case Derivation::repack_int4:
      ops[0] = {"scales", l.scales, scale};
      ops[1] = {"zero_point", l.zero_point, l.zero_points == ZeroPoints::unpacked ? scale : 1};
      ops[2] = {"dst", l.dst, l.kind == Derivation::dequant_int4 ? 2u : 4u};
      ops[3] = {"dst2", l.dst2, 2};
      break;
  }
  for (const Operand& op : ops) {
    if (op.name == nullptr || op.align <= 1 || op.ptr % op.align == 0) continue;
    return make_error(ErrorCode::invalid_argument, std::string(op.name) + ": device pointer " + hex(op.ptr) +
                                                       " is not aligned to its " + std::to_string(op.align) + "-byte elements");
  }
  return Status();
}

namespace {

}  // namespace

std::string_view derivation_name(Derivation d) noexcept {
  switch (d) {
    case Derivation::transpose: return "transpose";
    case Derivation::to_f16: return "to_f16";
    case Derivation::dequant_int4: return "dequant_int4";
    case Derivation::repack_int4: return "repack_int4";
    case Derivation::quant_int8: return "quant_int8";
  }
  return "unknown";
}

bool derivation_yields_pair(Derivation d) noexcept {
  return d == Derivation::repack_int4 || d == Derivation::quant_int8;
}

Result<DerivationSizes> derivation_sizes(const DerivationLaunch& l) {
  DerivationSizes s;
  std::uint64_t elements = 0;
  if (!mul(l.rows, l.cols, elements)) return overflow("rows x cols");
  const std::string kind(derivation_name(l.kind));

  switch (l.kind) {
    case Derivation::transpose: {
      const unsigned bits = dtype_bits(l.src_type);
      if (bits != 8 && bits != 16 && bits != 32 && bits != 64)
        return make_error(ErrorCode::unsupported, kind + ": element type " + std::string(dtype_name(l.src_type)) +
                                                      " is not 1, 2, 4 or 8 bytes wide");
      if (!mul(elements, bits / 8, s.src_bytes)) return overflow("transpose source bytes");
      s.dst_bytes = s.src_bytes;
      return s;
    }
    case Derivation::to_f16: {
      if (l.src_type != DataType::float32 && l.src_type != DataType::bfloat16)
        return make_error(ErrorCode::unsupported, kind + ": source must be float or bfloat16, not " +
                                                      std::string(dtype_name(l.src_type)));
      if (!mul(elements, dtype_bits(l.src_type) / 8, s.src_bytes)) return overflow("to_f16 source bytes");
      if (!mul(elements, 2, s.dst_bytes)) return overflow("to_f16 output bytes");
      return s;
    }
    case Derivation::quant_int8: {
      if (l.src_type != DataType::float32 && l.src_type != DataType::float16)
        return make_error(ErrorCode::unsupported, kind + ": source must be float or float16, not " +
                                                      std::string(dtype_name(l.src_type)));
      if (!mul(elements, dtype_bits(l.src_type) / 8, s.src_bytes)) return overflow("quant_int8 source bytes");
      s.dst_bytes = elements;
      if (!mul(l.rows, 4, s.dst2_bytes)) return overflow("quant_int8 scale bytes");
      return s;
    }
    case Derivation::dequant_int4:
    case Derivation::repack_int4: {
      if (l.src_type != DataType::float32 && l.src_type != DataType::float16)
        return make_error(ErrorCode::unsupported, kind + ": scales must be float or float16, not " +
                                                      std::string(dtype_name(l.src_type)));
      const std::uint64_t bs = l.block_size;
      if (bs < 16 || (bs & (bs - 1)) != 0) return bad("block_size", "must be a power of two >= 16, got " + std::to_string(bs));
      if (l.rows == 0 || l.cols == 0) return bad("N and K", "must both be non-zero");
      const std::uint64_t kb = ceil_div(l.cols, bs);
      const std::uint64_t scale_size = dtype_bits(l.src_type) / 8;
      std::uint64_t blocks = 0;
      if (!mul(l.rows, kb, blocks)) return overflow("N x k_blocks");
      if (!mul(blocks, bs / 2, s.src_bytes)) return overflow("B bytes");
      if (!mul(blocks, scale_size, s.scales_bytes)) return overflow("scales bytes");
      switch (l.zero_points) {
        case ZeroPoints::absent: s.zero_point_bytes = 0; break;
        case ZeroPoints::packed_u4:
          if (!mul(l.rows, ceil_div(kb, 2), s.zero_point_bytes)) return overflow("zero_point bytes");
          break;
        case ZeroPoints::unpacked: s.zero_point_bytes = blocks * scale_size; break;
        default: return bad("zero_points", "unknown form");
      }
      if (l.kind == Derivation::dequant_int4) {
        if (!mul(elements, 2, s.dst_bytes)) return overflow("dequant output bytes");
      } else {
        std::uint64_t words = 0;
        if (!mul(l.rows, ceil_div(l.cols, 8), words) || !mul(words, 4, s.dst_bytes)) return overflow("repacked words");
        s.dst2_bytes = blocks * 4;  // (scale, -scale*zp) as two f16
      }
      return s;
    }
  }
  return bad("kind", "unknown derivation " + std::to_string(static_cast<int>(l.kind)));
}

}  // namespace ballast
