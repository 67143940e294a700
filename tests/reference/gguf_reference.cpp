// The GGUF kinds' references (derive_dequant_gguf, derive_dequant_gguf_f32,
// derive_repack_gguf_int4: reference.hpp). dequant_gguf and
// dequant_gguf_f32 go a whole block at a time, walking each
// block in the order its format description lays it out (docs/derivations.md,
// "GGUF block types"): per half, per shift, per sixteen; deliberately not the
// element-indexed form of backends/common/gguf_blocks.hpp. Built with
// -ffp-contract=off (CMakeLists.txt), so each product and sum is one IEEE f32
// operation, as the description says.
#include <reference/reference.hpp>

#include <ballast/derivation_kinds.hpp>

#include <cstring>

namespace ballast::reference {

namespace {

using u8 = unsigned char;

float f16(const u8* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return static_cast<float>(f16_value(bits));
}

float f32(const u8* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// 32 elements from 16 bytes: low nibbles are elements 0..15, high 16..31.
void split_nibbles(const u8* qs, int out[32]) {
  for (int j = 0; j < 16; ++j) {
    out[j] = qs[j] % 16;
    out[j + 16] = qs[j] / 16;
  }
}

// The eight (scale, min) pairs of a Q4_K/Q5_K block's 12 bytes.
void k_scales(const u8* s, int sc[8], int mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] % 64;
    mn[j] = s[j + 4] % 64;
    sc[j + 4] = s[j + 8] % 16 + (s[j] / 64) * 16;
    mn[j + 4] = s[j + 8] / 16 + (s[j + 4] / 64) * 16;
  }
}

void block_values(DataType t, const u8* b, float* y) {
  switch (t) {
    case DataType::float32: y[0] = f32(b); return;
    case DataType::float16: y[0] = f16(b); return;
    case DataType::bfloat16: {
      std::uint16_t bits;
      std::memcpy(&bits, b, 2);
      y[0] = static_cast<float>(bf16_value(bits));
      return;
    }
    case DataType::q4_0: {
      int q[32];
      split_nibbles(b + 2, q);
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j] - 8) * f16(b);
      return;
    }
    case DataType::q4_1: {
      int q[32];
      split_nibbles(b + 4, q);
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j]) * f16(b) + f16(b + 2);
      return;
    }
    case DataType::q5_0:
    case DataType::q5_1: {
      const bool offset = t == DataType::q5_1;
      std::uint32_t high;
      std::memcpy(&high, b + (offset ? 4 : 2), 4);
      int q[32];
      split_nibbles(b + (offset ? 8 : 6), q);
      for (int j = 0; j < 32; ++j) {
        const int code = q[j] + static_cast<int>((high >> j) % 2) * 16;
        y[j] = offset ? static_cast<float>(code) * f16(b) + f16(b + 2) : static_cast<float>(code - 16) * f16(b);
      }
      return;
    }
    case DataType::q8_0:
      for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<signed char>(b[2 + j])) * f16(b);
      return;
    case DataType::q8_k:
      for (int j = 0; j < 256; ++j) y[j] = static_cast<float>(static_cast<signed char>(b[4 + j])) * f32(b);
      return;
    case DataType::q2_k: {
      const u8* scales = b;
      const u8* qs = b + 16;
      const float d = f16(b + 80), dmin = f16(b + 82);
      int sub = 0;
      for (int half = 0; half < 2; ++half)
        for (int shift = 0; shift < 8; shift += 2)
          for (int sixteen = 0; sixteen < 2; ++sixteen, ++sub) {
            const float dl = d * static_cast<float>(scales[sub] % 16);
            const float ml = dmin * static_cast<float>(scales[sub] / 16);
            for (int l = 0; l < 16; ++l) {
              const int q = (qs[32 * half + 16 * sixteen + l] >> shift) % 4;
              *y++ = dl * static_cast<float>(q) - ml;
            }
          }
      return;
    }
    case DataType::q3_k: {
      const u8* hmask = b;
      const u8* qs = b + 32;
      const u8* s = b + 96;
      const float d = f16(b + 108);
      int scale[16];
      for (int k = 0; k < 16; ++k) {
        const int low = k < 8 ? s[k] % 16 : s[k - 8] / 16;
        const int high = (s[8 + k % 4] >> (2 * (k / 4))) % 4;
        scale[k] = low + 16 * high - 32;
      }
      int sub = 0, bit = 0;
      for (int half = 0; half < 2; ++half)
        for (int shift = 0; shift < 8; shift += 2, ++bit)
          for (int sixteen = 0; sixteen < 2; ++sixteen, ++sub) {
            const float dl = d * static_cast<float>(scale[sub]);
            for (int l = 0; l < 16; ++l) {
              const int q = (qs[32 * half + 16 * sixteen + l] >> shift) % 4;
              const int has_high = (hmask[16 * sixteen + l] >> bit) % 2;
              *y++ = dl * static_cast<float>(q - (has_high ? 0 : 4));
            }
          }
      return;
    }
    case DataType::q4_k:
    case DataType::q5_k: {
      const bool five = t == DataType::q5_k;
      const float d = f16(b), dmin = f16(b + 2);
      int sc[8], mn[8];
      k_scales(b + 4, sc, mn);
      const u8* qh = b + 16;
      const u8* qs = b + (five ? 48 : 16);
      for (int pair = 0; pair < 4; ++pair)
        for (int nib = 0; nib < 2; ++nib) {
          const int sub = 2 * pair + nib;
          const float d1 = d * static_cast<float>(sc[sub]);
          const float m1 = dmin * static_cast<float>(mn[sub]);
          for (int l = 0; l < 32; ++l) {
            const int byte = qs[32 * pair + l];
            int q = nib == 0 ? byte % 16 : byte / 16;
            if (five) q += ((qh[l] >> sub) % 2) * 16;
            *y++ = d1 * static_cast<float>(q) - m1;
          }
        }
      return;
    }
    case DataType::q6_k: {
      const u8* ql = b;
      const u8* qh = b + 128;
      const u8* sc = b + 192;
      const float d = f16(b + 208);
      for (int half = 0; half < 2; ++half)
        for (int quarter = 0; quarter < 4; ++quarter)
          for (int l = 0; l < 32; ++l) {
            const int low_byte = ql[64 * half + 32 * (quarter % 2) + l];
            const int low = quarter < 2 ? low_byte % 16 : low_byte / 16;
            const int high = (qh[32 * half + l] >> (2 * quarter)) % 4;
            const int i = 128 * half + 32 * quarter + l;
            const float dl = d * static_cast<float>(static_cast<signed char>(sc[i / 16]));
            y[i] = dl * static_cast<float>(low + 16 * high - 32);
          }
      return;
    }
    default: return;  // derivation_sizes refused every other type
  }
}

void dequant(const DerivationLaunch& s, const Inputs& in, Outputs& out) {
  const kinds::GgufBlock& blk = *kinds::gguf_block(s.src_type);
  const bool f32_out = s.kind == Derivation::dequant_gguf_f32;
  const auto* src = reinterpret_cast<const u8*>(in.src.data());
  const std::uint64_t blocks = s.rows * (s.cols / blk.elements);
  float values[256];
  for (std::uint64_t i = 0; i < blocks; ++i) {
    block_values(s.src_type, src + i * blk.bytes, values);
    for (unsigned j = 0; j < blk.elements; ++j) {
      const std::uint64_t at = i * blk.elements + j;
      if (f32_out) {
        std::memcpy(out.dst.data() + 4 * at, &values[j], 4);
      } else {
        const std::uint16_t h = f16_from_f32(values[j]);
        std::memcpy(out.dst.data() + 2 * at, &h, 2);
      }
    }
  }
}

}  // namespace

void derive_dequant_gguf(const DerivationLaunch& s, const Inputs& in, Outputs& out) { dequant(s, in, out); }
void derive_dequant_gguf_f32(const DerivationLaunch& s, const Inputs& in, Outputs& out) { dequant(s, in, out); }

void derive_repack_gguf_int4(const DerivationLaunch& s, const Inputs& in, Outputs& out) {
  static constexpr unsigned kColumnOfNibble[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const kinds::GgufBlock& blk = *kinds::gguf_block(s.src_type);
  const bool q4_1 = s.src_type == DataType::q4_1;
  const auto* src = reinterpret_cast<const u8*>(in.src.data());
  const std::uint64_t blocks = s.cols / 32, words = s.cols / 8;
  auto code = [&](std::uint64_t row, std::uint64_t col) {
    const u8* b = src + (row * blocks + col / 32) * blk.bytes;
    const u8* qs = b + (q4_1 ? 4 : 2);
    const std::uint64_t e = col % 32;
    return e < 16 ? qs[e] % 16 : qs[e - 16] / 16;
  };
  for (std::uint64_t r = 0; r < s.rows; ++r) {
    for (std::uint64_t j = 0; j < words; ++j) {
      std::uint32_t word = 0;
      for (unsigned i = 0; i < 8; ++i) word += static_cast<std::uint32_t>(code(r, 8 * j + kColumnOfNibble[i])) << (4 * i);
      std::memcpy(out.dst.data() + 4 * (r * words + j), &word, 4);
    }
    for (std::uint64_t i = 0; i < blocks; ++i) {
      const u8* b = src + (r * blocks + i) * blk.bytes;
      const float d = f16(b);
      // value = q * scale + offset: Q4_0's (q - 8) * d is q * d + (-8 d).
      const std::uint16_t pair[2] = {f16_from_f32(d), f16_from_f32(q4_1 ? f16(b + 2) : -(d * 8.0f))};
      std::memcpy(out.dst2.data() + 4 * (r * blocks + i), pair, 4);
    }
  }
}

}  // namespace ballast::reference
