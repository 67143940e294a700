// Every derivation against a host computation built from
// backends/common/kernel_math.hpp, at aligned and unaligned pointers, with
// guard bytes around every output to prove nothing outside it is written.
#include "support.hpp"

#include "common/gguf_blocks.hpp"
#include "common/kernel_math.hpp"

#include <support/derivation_cases.hpp>

#include <cstdlib>
#include <random>
#include <thread>

namespace ballast::vulkan::test {
namespace {

using Bytes = std::vector<std::uint8_t>;

template <class T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <class T>
std::vector<T> values_of(const Bytes& b) {
  std::vector<T> out(b.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}

constexpr std::uint8_t kGuard = 0xab;
constexpr std::uint64_t kGuardBytes = 16;
// Inputs `shift` bytes into their buffers and outputs (shift + 1) % 4 bytes
// past their guard, so each shift misaligns the two differently; except
// kPacketAligned, which puts every operand on a 16-byte boundary (the
// packet pipelines of backends/vulkan/kernels.cpp).
constexpr std::uint64_t kPacketAligned = 16;
std::uint64_t output_shift(std::uint64_t shift) { return shift == kPacketAligned ? 0 : (shift + 1) % 4; }

struct Run {
  Bytes dst, dst2;
};

// Uploads the inputs `shift` bytes into their buffers, runs `l` (pointers
// filled in here, outputs at output_shift) and returns the outputs; fails
// if a guard byte changed.
Run run(Checked& b, DerivationLaunch l, const Bytes& src, const Bytes& scales, const Bytes& zero_points,
        std::uint64_t shift) {
  auto sizes = derivation_sizes(l);
  REQUIRE(sizes.ok());
  REQUIRE(sizes->src_bytes == src.size());
  REQUIRE(sizes->scales_bytes == scales.size());
  REQUIRE(sizes->zero_point_bytes == zero_points.size());
  std::vector<DevicePtr> owned;
  auto input = [&](const Bytes& data) -> DevicePtr {
    if (data.empty()) return 0;
    auto p = b.allocate(data.size() + shift, 256);
    REQUIRE(p.ok());
    owned.push_back(*p);
    REQUIRE(b.copy_to_device(*p, shift, std::as_bytes(std::span(data))).ok());
    return *p + shift;
  };
  auto output = [&](std::uint64_t bytes) -> DevicePtr {
    if (bytes == 0) return 0;
    Bytes guarded(bytes + 2 * kGuardBytes + output_shift(shift), kGuard);
    auto p = b.allocate(guarded.size(), 256);
    REQUIRE(p.ok());
    owned.push_back(*p);
    REQUIRE(b.copy_to_device(*p, 0, std::as_bytes(std::span(guarded))).ok());
    return *p + kGuardBytes + output_shift(shift);
  };
  l.src = input(src);
  l.scales = input(scales);
  l.zero_point = input(zero_points);
  l.dst = output(sizes->dst_bytes);
  l.dst2 = output(sizes->dst2_bytes);
  const Status launched = b.launch(l);
  INFO(launched.to_string());
  REQUIRE(launched.ok());
  const Status synced = b.synchronize();
  INFO(synced.to_string());
  REQUIRE(synced.ok());
  Run r;
  auto fetch = [&](DevicePtr p, std::uint64_t bytes) {
    if (bytes == 0) return Bytes{};
    Bytes all = download<std::uint8_t>(b, p - kGuardBytes, bytes + 2 * kGuardBytes);
    for (std::uint64_t i = 0; i < kGuardBytes; ++i) {
      CHECK(all[i] == kGuard);
      CHECK(all[kGuardBytes + bytes + i] == kGuard);
    }
    return Bytes(all.begin() + kGuardBytes, all.end() - kGuardBytes);
  };
  r.dst = fetch(l.dst, sizes->dst_bytes);
  r.dst2 = fetch(l.dst2, sizes->dst2_bytes);
  for (DevicePtr p : owned) CHECK(b.free(p).ok());
  return r;
}

using test_cases::awkward_floats;

const std::uint64_t kShifts[] = {0, 1, 2, 3, kPacketAligned};

}  // namespace

TEST_CASE("transpose: every element size, shapes and alignments, bit-exact") {
  auto b = open();
  std::mt19937 rng(1);
  for (DataType t : {DataType::uint8, DataType::float16, DataType::float32, DataType::float64}) {
    const std::uint64_t size = dtype_bits(t) / 8;
    // ... and shapes whose rows are whole 16-byte packets for every element size (the packet tiles),
    // with partial tiles at the right and bottom edges.
    for (auto [rows, cols] : {std::pair<std::uint64_t, std::uint64_t>{1, 1}, {7, 13}, {64, 33}, {129, 250}, {1, 1000},
                              {48, 80}, {32, 16}, {112, 96}}) {
      for (std::uint64_t shift : kShifts) {
        CAPTURE(size);
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(shift);
        const Bytes src = bytes_of(test_cases::random_bytes(rng, rows * cols * size));
        DerivationLaunch l;
        l.kind = Derivation::transpose;
        l.src_type = t;
        l.rows = rows;
        l.cols = cols;
        const Run r = run(*b, l, src, {}, {}, shift);
        Bytes expected(src.size());
        for (std::uint64_t i = 0; i < rows; ++i)
          for (std::uint64_t j = 0; j < cols; ++j)
            std::memcpy(&expected[(j * rows + i) * size], &src[(i * cols + j) * size], size);
        CHECK(r.dst == expected);
      }
    }
  }
}

TEST_CASE("to_f16 from f32 and bf16: round to nearest even, inf, NaN, subnormals, bit-exact") {
  auto b = open();
  const std::vector<float> f = awkward_floats(2001, 2);
  for (std::uint64_t shift : kShifts) {
    CAPTURE(shift);
    DerivationLaunch l;
    l.kind = Derivation::to_f16;
    l.src_type = DataType::float32;
    l.rows = 1;
    l.cols = f.size();
    const auto got = values_of<std::uint16_t>(run(*b, l, bytes_of(f), {}, {}, shift).dst);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < f.size(); ++i) wrong += got[i] != kmath::f16_bits_from_f32(f[i]);
    CHECK(wrong == 0);

    std::vector<std::uint16_t> bf(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) bf[i] = static_cast<std::uint16_t>(kmath::f32_bits(f[i]) >> 16);
    l.src_type = DataType::bfloat16;
    l.rows = 3;
    l.cols = 667;
    const auto got_bf = values_of<std::uint16_t>(run(*b, l, bytes_of(bf), {}, {}, shift).dst);
    wrong = 0;
    for (std::size_t i = 0; i < bf.size(); ++i) wrong += got_bf[i] != kmath::f16_bits_from_bf16_bits(bf[i]);
    CHECK(wrong == 0);
  }
}

namespace {

struct Int4Case {
  std::uint64_t n, k;
  std::uint32_t block;
};

struct Int4Inputs {
  Bytes b, scales, zero_points;
  std::vector<float> scale_f, zp_f;  // per (n, block), as f32
};

// The shared case's operands, with its scales and zero points as f32 for
// the kmath computations.
Int4Inputs make_int4(const Int4Case& c, DataType scale_type, ZeroPoints zp, std::mt19937& rng) {
  DerivationLaunch shape;
  shape.kind = Derivation::dequant_int4;
  shape.src_type = scale_type;
  shape.rows = c.n;
  shape.cols = c.k;
  shape.block_size = c.block;
  shape.zero_points = zp;
  const test_cases::DerivationCase generated = test_cases::int4_normal_case(rng, shape);
  const std::uint64_t kb = k_blocks(c.k, c.block);
  Int4Inputs in;
  in.b = bytes_of(generated.src);
  in.scales = bytes_of(generated.scales);
  in.zero_points = bytes_of(generated.zero_points);
  const bool f16 = scale_type == DataType::float16;
  auto typed = [&](const Bytes& v, std::uint64_t i) {
    if (f16) return kmath::f32_from_f16_bits(static_cast<std::uint16_t>(v[2 * i] | (v[2 * i + 1] << 8)));
    std::uint32_t u;
    std::memcpy(&u, v.data() + 4 * i, 4);
    return kmath::f32_from_bits(u);
  };
  for (std::uint64_t i = 0; i < c.n * kb; ++i) in.scale_f.push_back(typed(in.scales, i));
  if (zp == ZeroPoints::packed_u4) {
    for (std::uint64_t n = 0; n < c.n; ++n)
      for (std::uint64_t blk = 0; blk < kb; ++blk)
        in.zp_f.push_back(kmath::zero_point_packed(in.zero_points.data(), kb, n, blk));
  } else if (zp == ZeroPoints::unpacked) {
    for (std::uint64_t i = 0; i < c.n * kb; ++i) in.zp_f.push_back(typed(in.zero_points, i));
  } else {
    in.zp_f.assign(c.n * kb, kmath::kDefaultZeroPoint);
  }
  return in;
}

const Int4Case kInt4Cases[] = {{1, 16, 16},    {3, 50, 16},     {5, 130, 32},  {4, 7, 16}, {17, 1000, 64},
                               {2, 4096, 128}, {3, 96, 16},     {6, 160, 32},  {5, 288, 128}};

}  // namespace

TEST_CASE("dequant_int4 and repack_int4: scale types, zero-point forms, ragged K, bit-exact") {
  auto b = open();
  std::mt19937 rng(3);
  for (DataType st : {DataType::float32, DataType::float16}) {
    for (ZeroPoints zp : {ZeroPoints::absent, ZeroPoints::packed_u4, ZeroPoints::unpacked}) {
      for (const Int4Case& c : kInt4Cases)
      // Packet-aligned operands (the packet pipelines where K allows), word-aligned inputs, shifted ones.
      for (const std::uint64_t shift : {kPacketAligned, std::uint64_t{0}, (c.n + c.k) % 4}) {
        CAPTURE(dtype_name(st));
        CAPTURE(static_cast<int>(zp));
        CAPTURE(c.n);
        CAPTURE(c.k);
        CAPTURE(c.block);
        CAPTURE(shift);
        const Int4Inputs in = make_int4(c, st, zp, rng);
        const std::uint64_t kb = k_blocks(c.k, c.block);
        DerivationLaunch l;
        l.kind = Derivation::dequant_int4;
        l.src_type = st;
        l.rows = c.n;
        l.cols = c.k;
        l.block_size = c.block;
        l.zero_points = zp;
        const auto deq = values_of<std::uint16_t>(run(*b, l, in.b, in.scales, in.zero_points, shift).dst);
        std::size_t wrong = 0;
        for (std::uint64_t n = 0; n < c.n; ++n) {
          const std::uint8_t* row = in.b.data() + n * kb * c.block / 2;
          for (std::uint64_t k = 0; k < c.k; ++k) {
            const std::uint64_t blk = k / c.block;
            const auto want = kmath::dequant_f16_bits(kmath::int4_code(row, k), in.zp_f[n * kb + blk], in.scale_f[n * kb + blk]);
            wrong += deq[n * c.k + k] != want;
          }
        }
        CHECK(wrong == 0);

        l.kind = Derivation::repack_int4;
        const Run r = run(*b, l, in.b, in.scales, in.zero_points, shift);
        const auto words = values_of<std::uint32_t>(r.dst);
        const auto pairs = values_of<std::uint32_t>(r.dst2);
        const std::uint64_t per_row = (c.k + 7) / 8;
        wrong = 0;
        for (std::uint64_t n = 0; n < c.n; ++n) {
          const std::uint8_t* row = in.b.data() + n * kb * c.block / 2;
          for (std::uint64_t j = 0; j < per_row; ++j) {
            std::uint32_t codes[8];
            for (std::uint32_t cc = 0; cc < 8; ++cc) {
              const std::uint64_t k = 8 * j + cc;
              codes[cc] = k < c.k ? kmath::int4_code(row, k)
                                  : (zp == ZeroPoints::unpacked ? kmath::zero_point_code(in.zp_f[n * kb + k / c.block])
                                                                : static_cast<std::uint32_t>(in.zp_f[n * kb + k / c.block]));
            }
            wrong += words[n * per_row + j] != kmath::repack_word(codes);
          }
          for (std::uint64_t blk = 0; blk < kb; ++blk)
            wrong += pairs[n * kb + blk] != kmath::repack_scale_pair(in.scale_f[n * kb + blk], in.zp_f[n * kb + blk]);
        }
        CHECK(wrong == 0);
      }
    }
  }
}

namespace {

struct Quantised {
  std::vector<std::int8_t> codes;
  std::vector<float> scales;
};

Quantised quant_reference(const std::vector<float>& w, std::uint64_t n, std::uint64_t k) {
  Quantised q;
  for (std::uint64_t r = 0; r < n; ++r) {
    float max = 0.0f;
    for (std::uint64_t c = 0; c < k; ++c) max = kmath::abs_max_step(max, w[r * k + c]);
    const float scale = kmath::quant_int8_scale(max);
    q.scales.push_back(scale);
    for (std::uint64_t c = 0; c < k; ++c) q.codes.push_back(kmath::quant_int8_code(w[r * k + c], scale));
  }
  return q;
}

void check_quant(Checked& b, const std::vector<float>& w, std::uint64_t n, std::uint64_t k, DataType type,
                 std::uint64_t shift) {
  CAPTURE(n);
  CAPTURE(k);
  CAPTURE(shift);
  Bytes src;
  std::vector<float> as_f32 = w;
  if (type == DataType::float16) {
    std::vector<std::uint16_t> h(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      h[i] = kmath::f16_bits_from_f32(w[i]);
      as_f32[i] = kmath::f32_from_f16_bits(h[i]);
    }
    src = bytes_of(h);
  } else {
    src = bytes_of(w);
  }
  DerivationLaunch l;
  l.kind = Derivation::quant_int8;
  l.src_type = type;
  l.rows = n;
  l.cols = k;
  const Run r = run(b, l, src, {}, {}, shift);
  const Quantised want = quant_reference(as_f32, n, k);
  const auto scales = values_of<std::uint32_t>(r.dst2);
  // Codes exact unless the backend declares int8_codes_within_one (a GPU
  // whose division is not correctly rounded; never lavapipe).
  const int allowed = b.capabilities().int8_codes_within_one ? 1 : 0;
  std::size_t wrong_scales = 0, wrong_codes = 0;
  for (std::uint64_t i = 0; i < n; ++i) wrong_scales += scales[i] != kmath::f32_bits(want.scales[i]);
  for (std::size_t i = 0; i < want.codes.size(); ++i) {
    const int got = static_cast<std::int8_t>(r.dst[i]);
    if (std::abs(got - want.codes[i]) > allowed && wrong_codes++ == 0)
      FAIL_CHECK("code " << i << " (row " << i / k << ", col " << i % k << ", w " << as_f32[i] << "): got " << got
                         << ", want " << int{want.codes[i]});
  }
  CHECK(wrong_scales == 0);
  CHECK(wrong_codes == 0);
}

}  // namespace

TEST_CASE("quant_int8 from f32 and f16: scales and codes bit-exact") {
  auto b = open();
  std::mt19937 rng(4);
  for (DataType t : {DataType::float32, DataType::float16}) {
    CAPTURE(dtype_name(t));
    for (auto [n, k] : {std::pair<std::uint64_t, std::uint64_t>{1, 1}, {3, 7}, {33, 1000}, {5, 4097}, {7, 1024}, {3, 16}}) {
      std::normal_distribution<float> normal(0.0f, 2.0f);
      std::vector<float> w(n * k);
      for (auto& x : w) x = normal(rng);
      check_quant(*b, w, n, k, t, (n * k) % 4);
      if (k % 16 == 0) check_quant(*b, w, n, k, t, kPacketAligned);
    }
    // Awkward rows: all zero, subnormal only (f32), a NaN, an infinity, tiny
    // maxima, exact ties, and a row that reaches the clamp from both sides.
    for (const std::uint64_t k : {19, 32}) {
      const std::vector<float> w = test_cases::quant_int8_awkward_rows(k);
      check_quant(*b, w, 8, k, t, 1);
      check_quant(*b, w, 8, k, t, kPacketAligned);
    }
  }
  // A scale near the smallest normal f32 (row maximum 127 * 2^-126): subnormal elements have codes up to
  // 1 there, which a driver that flushes subnormals (lavapipe does) would turn into 0 through a reciprocal;
  // the packet pipeline must take the exact path for such rows.
  std::vector<float> tiny(16);
  const std::uint32_t bits[] = {0x007fffffu, 0x00400000u, 0x00600000u, 0x80700000u, 0x00000001u, 0x003fffffu};
  for (std::size_t i = 0; i < tiny.size(); ++i) tiny[i] = kmath::f32_from_bits(bits[i % 6]);
  tiny[7] = 127.0f * kmath::f32_from_bits(0x00800000u);
  check_quant(*b, tiny, 1, 16, DataType::float32, kPacketAligned);
}

namespace {

// dequant_gguf / dequant_gguf_f32 of `src` ([rows, blocks] blocks of `type`)
// at `shift`, element by element against gguf_blocks.hpp's block_value.
void check_gguf(Checked& b, Derivation kind, DataType type, std::uint64_t rows, std::uint64_t blocks, const Bytes& src,
                std::uint64_t shift) {
  const kinds::GgufBlock& block = *kinds::gguf_block(type);
  DerivationLaunch l;
  l.kind = kind;
  l.src_type = type;
  l.rows = rows;
  l.cols = blocks * block.elements;
  const Run r = run(b, l, src, {}, {}, shift);
  const bool f16 = kind == Derivation::dequant_gguf;
  std::size_t wrong = 0;
  std::string first_wrong;
  for (std::uint64_t e = 0; e < rows * l.cols; ++e) {
    const std::size_t before = wrong;
    const float v = kmath::gguf::block_value(static_cast<std::uint32_t>(type), src.data() + e / block.elements * block.bytes,
                                             static_cast<std::uint32_t>(e % block.elements));
    if (f16) {
      std::uint16_t got;
      std::memcpy(&got, r.dst.data() + 2 * e, 2);
      // Any NaN for a NaN (as reference::compare): which operand's payload
      // an operation keeps is not specified.
      const std::uint16_t want = kmath::f16_bits_from_f32(v);
      wrong += got != want && !(kmath::is_nan(v) && (got & 0x7fffu) > 0x7c00u);
    } else {
      std::uint32_t got;
      std::memcpy(&got, r.dst.data() + 4 * e, 4);
      const std::uint32_t want = kmath::f32_bits(v);
      wrong += got != want && !(kmath::is_nan(v) && kmath::is_nan(kmath::f32_from_bits(got)));
    }
    if (wrong != before && first_wrong.empty())
      first_wrong = "element " + std::to_string(e) + " (expected " + std::to_string(v) + ")";
  }
  CHECK_MESSAGE(wrong == 0, dtype_name(type) << " " << derivation_name(kind) << " shift " << shift << ": " << wrong
                                             << " wrong, first " << first_wrong);
}

}  // namespace

TEST_CASE("dequant_gguf and dequant_gguf_f32: every block type at every alignment, bit-exact") {
  auto b = open();
  std::uint64_t seed = 7000;
  for (const kinds::GgufBlock& block : kinds::kGgufBlocks) {
    CAPTURE(dtype_name(block.type));
    for (Derivation kind : {Derivation::dequant_gguf, Derivation::dequant_gguf_f32}) {
      CAPTURE(derivation_name(kind));
      for (std::uint64_t shift : kShifts) {
        CAPTURE(shift);
        for (bool special : {false, true}) {
          const std::uint64_t rows = 3, blocks = block.elements == 1 ? 37 : 2;
          const auto c = test_cases::gguf_case(kind, block.type, rows, blocks, special, ++seed);
          Bytes src(c.src.size());
          std::memcpy(src.data(), c.src.data(), src.size());
          check_gguf(*b, kind, block.type, rows, blocks, src, shift);
        }
      }
    }
  }
  // Q8_K blocks whose f32 scale is subnormal: a driver that flushes
  // subnormals (lavapipe does) would make every f32 output a zero; the
  // shader takes those products by integer logic.
  std::mt19937 rng(8);
  Bytes q8k(16 * 292);
  for (auto& x : q8k) x = static_cast<std::uint8_t>(rng());
  for (std::size_t i = 0; i < 16; ++i) {
    const std::uint32_t d = (i == 0 ? 0x007fffffu : i == 1 ? 0x80000001u : rng() & 0x807fffffu) | (i == 2 ? 1u : 0u);
    std::memcpy(q8k.data() + 292 * i, &d, 4);
  }
  for (std::uint64_t shift : kShifts) {
    CAPTURE(shift);
    check_gguf(*b, Derivation::dequant_gguf_f32, DataType::q8_k, 4, 4, q8k, shift);
    check_gguf(*b, Derivation::dequant_gguf, DataType::q8_k, 4, 4, q8k, shift);
  }
}

namespace {

// repack_gguf_int4 of `src` ([rows, blocks] Q4_0 / Q4_1 blocks) at `shift`,
// word by word and pair by pair against gguf_blocks.hpp's q4_repack_word
// and q4_repack_pair; a pair's half matches a NaN with any NaN.
void check_repack_gguf(Checked& b, DataType type, std::uint64_t rows, std::uint64_t blocks, const Bytes& src,
                       std::uint64_t shift) {
  const kinds::GgufBlock& block = *kinds::gguf_block(type);
  DerivationLaunch l;
  l.kind = Derivation::repack_gguf_int4;
  l.src_type = type;
  l.rows = rows;
  l.cols = blocks * block.elements;
  const Run r = run(b, l, src, {}, {}, shift);
  REQUIRE(r.dst.size() == rows * blocks * 16);
  REQUIRE(r.dst2.size() == rows * blocks * 4);
  const auto t = static_cast<std::uint32_t>(type);
  std::size_t wrong_words = 0, wrong_pairs = 0;
  std::string first_wrong;
  auto half_matches = [](std::uint32_t got, std::uint32_t want) {
    return got == want || ((got & 0x7fffu) > 0x7c00u && (want & 0x7fffu) > 0x7c00u);
  };
  for (std::uint64_t k = 0; k < rows * blocks; ++k) {
    const std::uint8_t* blk = src.data() + k * block.bytes;
    for (std::uint32_t j = 0; j < 4; ++j) {
      std::uint32_t got;
      std::memcpy(&got, r.dst.data() + 4 * (4 * k + j), 4);
      const std::uint32_t want = kmath::gguf::q4_repack_word(t, blk, j);
      if (got != want) {
        if (first_wrong.empty())
          first_wrong = "word " + std::to_string(4 * k + j) + " got " + std::to_string(got) + " expected " +
                        std::to_string(want);
        ++wrong_words;
      }
    }
    std::uint32_t got;
    std::memcpy(&got, r.dst2.data() + 4 * k, 4);
    const std::uint32_t want = kmath::gguf::q4_repack_pair(t, blk);
    if (!half_matches(got & 0xffffu, want & 0xffffu) || !half_matches(got >> 16, want >> 16)) {
      if (first_wrong.empty())
        first_wrong = "pair " + std::to_string(k) + " got " + std::to_string(got) + " expected " + std::to_string(want);
      ++wrong_pairs;
    }
  }
  CHECK_MESSAGE(wrong_words + wrong_pairs == 0, dtype_name(type) << " repack_gguf_int4 shift " << shift << ": "
                                                                 << wrong_words << " words and " << wrong_pairs
                                                                 << " pairs wrong, first " << first_wrong);
}

}  // namespace

TEST_CASE("repack_gguf_int4: Q4_0 and Q4_1 at every alignment, bit-exact (NaN for NaN in pairs)") {
  auto b = open();
  std::uint64_t seed = 7500;
  for (DataType type : {DataType::q4_0, DataType::q4_1}) {
    CAPTURE(dtype_name(type));
    const kinds::GgufBlock& block = *kinds::gguf_block(type);
    for (std::uint64_t shift : kShifts) {
      CAPTURE(shift);
      for (bool special : {false, true}) {
        for (auto [rows, blocks] : {std::pair<std::uint64_t, std::uint64_t>{1, 1}, {3, 2}, {5, 7}, {64, 9}}) {
          const auto c = test_cases::gguf_case(Derivation::repack_gguf_int4, type, rows, blocks, special, ++seed);
          Bytes src(c.src.size());
          std::memcpy(src.data(), c.src.data(), src.size());
          check_repack_gguf(*b, type, rows, blocks, src, shift);
        }
      }
    }
    // Scales the pairs must carry exactly: zeros, subnormal, largest and
    // overflowing (-8d past f16's range), infinities, quiet and signalling
    // NaNs, in d and (Q4_1) m.
    const std::uint16_t halves[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x0400, 0x7bff, 0xfbff, 0x5000,
                                    0x57ff, 0x5800, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfd55, 0x3c00};
    constexpr std::size_t n = sizeof halves / sizeof halves[0];
    std::mt19937 rng(9);
    Bytes src(n * n * block.bytes);
    for (auto& x : src) x = static_cast<std::uint8_t>(rng());
    for (std::size_t i = 0; i < n * n; ++i) {
      std::memcpy(src.data() + i * block.bytes, &halves[i % n], 2);
      if (type == DataType::q4_1) std::memcpy(src.data() + i * block.bytes + 2, &halves[i / n], 2);
    }
    for (std::uint64_t shift : kShifts) {
      CAPTURE(shift);
      check_repack_gguf(*b, type, n, n, src, shift);
    }
  }
}

TEST_CASE("work beyond one dispatch is split, not truncated") {
  auto b = open("?max_workgroups=2");
  // Two f16 per word; with two workgroups per dispatch this needs four dispatches.
  const std::vector<float> f = awkward_floats(2 * (2 * kWorkgroupSize * kWordsPerInvocation) * 3 + 17, 5);
  DerivationLaunch l;
  l.kind = Derivation::to_f16;
  l.src_type = DataType::float32;
  l.rows = 1;
  l.cols = f.size();
  const auto got = values_of<std::uint16_t>(run(*b, l, bytes_of(f), {}, {}, 1).dst);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < f.size(); ++i) wrong += got[i] != kmath::f16_bits_from_f32(f[i]);
  CHECK(wrong == 0);

  // The packet pipeline: 768 packets of 64 per workgroup, six dispatches, and a tail of five elements.
  const std::vector<float> g = awkward_floats(8 * kWorkgroupSize * 12 + 5, 6);
  l.cols = g.size();
  const auto got_packets = values_of<std::uint16_t>(run(*b, l, bytes_of(g), {}, {}, kPacketAligned).dst);
  wrong = 0;
  for (std::size_t i = 0; i < g.size(); ++i) wrong += got_packets[i] != kmath::f16_bits_from_f32(g[i]);
  CHECK(wrong == 0);

  for (const std::uint64_t k : {9, 16}) {  // 11 rows, 2 workgroups per dispatch; the word then the packet pipeline
    std::vector<float> w(11 * k);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) - 6.0f;
    check_quant(*b, w, 11, k, DataType::float32, k == 16 ? kPacketAligned : 0);
  }
}

TEST_CASE("packet rows without a division: exact for every index below 2^31") {
  std::mt19937 rng(8);
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t d = 1; d <= 3000; ++d) divisors.push_back(d);
  for (std::uint32_t d : {4095u, 4097u, 12289u, 65535u, 65537u, 1u << 20, (1u << 20) + 1, 0x7fffffffu, 0x80000001u, 0xffffffffu})
    divisors.push_back(d);
  for (int i = 0; i < 2000; ++i) divisors.push_back(rng() | 1u);
  std::size_t wrong = 0;
  for (const std::uint32_t d : divisors) {
    const PacketDivider div = packet_divider(d);
    auto quotient = [&](std::uint32_t i) -> std::uint32_t {
      if (div.mul == 0) return i >> div.shift;
      return static_cast<std::uint32_t>((std::uint64_t{i} * div.mul) >> (32 + div.shift));
    };
    std::vector<std::uint32_t> indices = {0, 1, 0x7fffffffu, 0x7ffffffeu};
    for (std::uint64_t m : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{0x7fffffffu} / d})
      for (std::int64_t delta : {-1, 0, 1}) {
        const std::int64_t i = static_cast<std::int64_t>(m * d) + delta;
        if (i >= 0 && i < 0x80000000ll) indices.push_back(static_cast<std::uint32_t>(i));
      }
    for (int r = 0; r < 64; ++r) indices.push_back(rng() & 0x7fffffffu);
    for (const std::uint32_t i : indices)
      if (quotient(i) != i / d && wrong++ == 0) FAIL_CHECK(i << " / " << d << ": got " << quotient(i));
  }
  CHECK(wrong == 0);
}

TEST_CASE("launches are validated before anything runs") {
  auto b = open();
  auto small = b->allocate(16, 256);
  auto big = b->allocate(4096, 256);
  REQUIRE(small.ok());
  REQUIRE(big.ok());
  DerivationLaunch l;
  l.kind = Derivation::transpose;
  l.src_type = DataType::float32;
  l.rows = 8;
  l.cols = 8;
  l.src = *big;
  l.dst = *small;  // 256 bytes needed
  Status s = b->launch(l);
  CHECK(s.code() == ErrorCode::out_of_bounds);
  CHECK(s.error().message.find("dst") != std::string::npos);
  l.dst = *big + 4096 - 256;
  l.src = 0xdead0000;
  s = b->launch(l);
  CHECK(s.code() == ErrorCode::invalid_argument);
  CHECK(s.error().message.find("src") != std::string::npos);
  l.src_type = DataType::string;
  CHECK(b->launch(l).code() == ErrorCode::unsupported);
  DerivationLaunch q;
  q.kind = Derivation::dequant_int4;
  q.src_type = DataType::float32;
  q.rows = 1;
  q.cols = 16;
  q.block_size = 16;
  q.src = *big;
  q.scales = *big + 8;
  q.dst = *big + 64;
  q.zero_points = ZeroPoints::packed_u4;
  q.zero_point = 0;  // missing
  s = b->launch(q);
  CHECK(s.code() == ErrorCode::invalid_argument);
  CHECK(s.error().message.find("zero_point") != std::string::npos);
  CHECK(b->synchronize().ok());
  CHECK(b->free(*small).ok());
  CHECK(b->free(*big).ok());
}

TEST_CASE("launches from several threads") {
  auto b = open();
  std::vector<std::thread> threads;
  std::vector<int> ok(3, 0);
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<float> f = awkward_floats(3000 + 7 * t, 10 + t);
      DerivationLaunch l;
      l.kind = Derivation::to_f16;
      l.src_type = DataType::float32;
      l.rows = 1;
      l.cols = f.size();
      auto src = b->allocate(f.size() * 4, 256);
      auto dst = b->allocate(f.size() * 2, 256);
      if (!src || !dst) return;
      if (!b->copy_to_device(*src, 0, std::as_bytes(std::span(f))).ok()) return;
      l.src = *src;
      l.dst = *dst;
      for (int round = 0; round < 4; ++round)
        if (!b->launch(l).ok()) return;
      if (!b->synchronize().ok()) return;
      std::vector<std::uint16_t> got(f.size());
      if (!b->copy_to_host(std::as_writable_bytes(std::span(got)), *dst, 0).ok()) return;
      for (std::size_t i = 0; i < f.size(); ++i)
        if (got[i] != kmath::f16_bits_from_f32(f[i])) return;
      if (b->free(*src).ok() && b->free(*dst).ok()) ok[t] = 1;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == std::vector<int>{1, 1, 1});
}

}  // namespace ballast::vulkan::test
