// The GPU kernels' per-thread arithmetic, run on the CPU and compared with
// the scalar reference under the documented tolerances.
#include "support/derivation_cases.hpp"
#include "host_kernels.hpp"
#include "reference/reference.hpp"

#include <ballast/dtype.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <random>

using namespace ballast;
using namespace ballast::gpu;

namespace {

std::uint64_t address(const std::vector<std::byte>& v) { return reinterpret_cast<std::uintptr_t>(v.data()); }
std::uint64_t address(std::vector<std::byte>& v) { return reinterpret_cast<std::uintptr_t>(v.data()); }

}  // namespace

TEST_CASE("kernel per-thread bodies match the scalar reference for every derivation") {
  int checked = 0;
  for (const test_cases::DerivationCase& c : test_cases::kernel_cases()) {
    CAPTURE(c.label);
    auto sizes = derivation_sizes(c.shape);
    REQUIRE(sizes.ok());
    auto expected = reference::derive(c.shape, {c.src, c.scales, c.zero_points});
    REQUIRE_MESSAGE(expected.ok(), expected.error().to_string());

    std::vector<std::byte> dst(sizes->dst_bytes), dst2(sizes->dst2_bytes);
    KernelArgs a;
    a.kind = c.shape.kind;
    a.src_type = static_cast<KernelType>(c.shape.src_type);
    a.element_bytes = dtype_bits(c.shape.src_type) / 8;
    a.block_size = c.shape.block_size;
    a.zero_points = c.shape.zero_points;
    a.rows = c.shape.rows;
    a.cols = c.shape.cols;
    a.src = address(c.src);
    a.scales = address(c.scales);
    a.zero_point = address(c.zero_points);
    a.dst = address(dst);
    a.dst2 = address(dst2);
    a.src_cols = c.shape.src_cols;
    a.col_offset = c.shape.col_offset;
    testing::run_on_host(a);

    const reference::Comparison cmp = reference::compare(c.shape, *expected, dst, dst2);
    CHECK_MESSAGE(cmp.ok, cmp.message);
    ++checked;
  }
  CHECK(checked > 100);
}

// slice moves units of 16, 8, 4, 2 or 1 bytes, the widest that the
// addresses and the runs allow: each slice case again with its source and
// its output 1, 2, 4 and 8 bytes past a 16-byte boundary.
TEST_CASE("slice kernel walk: every unit width, from the operands' alignment") {
  int checked = 0;
  for (const test_cases::DerivationCase& c : test_cases::kernel_cases()) {
    if (c.shape.kind != Derivation::slice) continue;
    auto expected = reference::derive(c.shape, {c.src, c.scales, c.zero_points});
    REQUIRE(expected.ok());
    for (std::uint64_t shift : {1u, 2u, 4u, 8u}) {
      CAPTURE(c.label);
      CAPTURE(shift);
      std::vector<std::byte> src_bytes(c.src.size() + 32), dst_bytes(expected->dst.size() + 32);
      const auto past_boundary = [&](std::vector<std::byte>& v) {
        return v.data() + (16 - reinterpret_cast<std::uintptr_t>(v.data()) % 16) % 16 + shift;
      };
      std::byte* const src = past_boundary(src_bytes);
      std::byte* const dst = past_boundary(dst_bytes);
      std::memcpy(src, c.src.data(), c.src.size());
      KernelArgs a;
      a.kind = Derivation::slice;
      a.element_bytes = dtype_bits(c.shape.src_type) / 8;
      a.rows = c.shape.rows;
      a.cols = c.shape.cols;
      a.src_cols = c.shape.src_cols;
      a.col_offset = c.shape.col_offset;
      a.src = reinterpret_cast<std::uintptr_t>(src);
      a.dst = reinterpret_cast<std::uintptr_t>(dst);
      testing::run_on_host(a);
      CHECK(std::memcmp(dst, expected->dst.data(), expected->dst.size()) == 0);
      ++checked;
    }
  }
  CHECK(checked >= 4 * 32);
}

// kernel_cases() hands the kernels 16-byte aligned operands, so the GGUF
// kernel takes its widest path for every case; here each GGUF case runs
// again with the output one element past a 16-byte boundary (the
// element-by-element path) and with the source one byte past it (whole
// groups from byte loads, where plain float sources use 16-byte loads).
TEST_CASE("dequant_gguf kernels match the reference with operands that are not 16-byte aligned") {
  int checked = 0;
  for (const test_cases::DerivationCase& c : test_cases::kernel_cases()) {
    if (!derivation_kind(c.shape.kind).gguf_blocks || c.shape.kind == Derivation::repack_gguf_int4) continue;
    CAPTURE(c.label);
    auto sizes = derivation_sizes(c.shape);
    REQUIRE(sizes.ok());
    auto expected = reference::derive(c.shape, {c.src, c.scales, c.zero_points});
    REQUIRE_MESSAGE(expected.ok(), expected.error().to_string());
    const std::size_t element = c.shape.kind == Derivation::dequant_gguf_f32 ? 4 : 2;
    for (const auto& [src_shift, dst_shift] : {std::pair<std::size_t, std::size_t>{0, element}, {1, 0}}) {
      CAPTURE(src_shift);
      CAPTURE(dst_shift);
      // 16-byte aligned bases inside over-allocated buffers, then shifted.
      const auto at = [](std::vector<std::byte>& v, std::size_t shift) {
        return v.data() + (16 - reinterpret_cast<std::uintptr_t>(v.data()) % 16) % 16 + shift;
      };
      std::vector<std::byte> src_storage(c.src.size() + 32), dst_storage(sizes->dst_bytes + 32);
      std::byte* src = at(src_storage, src_shift);
      std::byte* dst = at(dst_storage, dst_shift);
      std::memcpy(src, c.src.data(), c.src.size());
      KernelArgs a;
      a.kind = c.shape.kind;
      a.src_type = static_cast<KernelType>(c.shape.src_type);
      a.rows = c.shape.rows;
      a.cols = c.shape.cols;
      a.src = reinterpret_cast<std::uintptr_t>(src);
      a.dst = reinterpret_cast<std::uintptr_t>(dst);
      testing::run_on_host(a);
      const std::vector<std::byte> out(dst, dst + sizes->dst_bytes);
      const reference::Comparison cmp = reference::compare(c.shape, *expected, out, {});
      CHECK_MESSAGE(cmp.ok, cmp.message);
      ++checked;
    }
  }
  CHECK(checked >= 14 * 2 * 3 * 2);
}

// repack_gguf_int4's launches built here: random block bytes of Q4_0 and
// Q4_1, several shapes (one block, one row), with the words 16-byte
// aligned (one 16-byte store per block) or only 4-byte aligned (word by
// word), and the pairs 4-byte or only 2-byte aligned (byte stores); every
// word and pair equals kmath::gguf::q4_repack_word / q4_repack_pair.
TEST_CASE("repack_gguf_int4 kernel equals q4_repack_word and q4_repack_pair, whatever the alignment") {
  std::mt19937 rng(0x9e3779b9u);
  int checked = 0;
  for (const KernelType type : {KernelType::q4_0, KernelType::q4_1}) {
    const std::uint32_t block_bytes = type == KernelType::q4_0 ? 18 : 20;
    for (const auto& [rows, cols] : {std::pair<std::uint64_t, std::uint64_t>{1, 32}, {1, 96}, {3, 32}, {5, 160}, {2, 1024}}) {
      for (const auto& [dst_shift, dst2_shift] : {std::pair<std::size_t, std::size_t>{0, 0}, {4, 2}, {0, 2}, {8, 6}}) {
        CAPTURE(static_cast<std::uint32_t>(type));
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(dst_shift);
        CAPTURE(dst2_shift);
        const std::uint64_t blocks = rows * (cols / 32);
        std::vector<std::uint8_t> src(blocks * block_bytes);
        for (auto& b : src) b = static_cast<std::uint8_t>(rng());
        const auto at = [](std::vector<std::byte>& v, std::size_t shift) {
          return v.data() + (16 - reinterpret_cast<std::uintptr_t>(v.data()) % 16) % 16 + shift;
        };
        std::vector<std::byte> dst_storage(4 * 4 * blocks + 32), dst2_storage(4 * blocks + 32);
        std::byte* dst = at(dst_storage, dst_shift);
        std::byte* dst2 = at(dst2_storage, dst2_shift);
        KernelArgs a;
        a.kind = Derivation::repack_gguf_int4;
        a.src_type = type;
        a.rows = rows;
        a.cols = cols;
        a.src = reinterpret_cast<std::uintptr_t>(src.data());
        a.dst = reinterpret_cast<std::uintptr_t>(dst);
        a.dst2 = reinterpret_cast<std::uintptr_t>(dst2);
        testing::run_on_host(a);
        bool all = true;
        for (std::uint64_t i = 0; i < blocks; ++i) {
          const std::uint8_t* block = src.data() + i * block_bytes;
          for (std::uint32_t j = 0; j < 4; ++j) {
            std::uint32_t got;
            std::memcpy(&got, dst + 4 * (4 * i + j), 4);
            const std::uint32_t want = kmath::gguf::q4_repack_word(static_cast<std::uint32_t>(type), block, j);
            if (got != want) {
              all = false;
              FAIL_CHECK("block " << i << " word " << j << ": " << got << " != " << want);
            }
          }
          std::uint32_t got;
          std::memcpy(&got, dst2 + 4 * i, 4);
          const std::uint32_t want = kmath::gguf::q4_repack_pair(static_cast<std::uint32_t>(type), block);
          if (got != want) {
            all = false;
            FAIL_CHECK("block " << i << " pair: " << got << " != " << want);
          }
        }
        // Nothing written past the outputs.
        for (std::byte* p = dst + 16 * blocks; p < dst_storage.data() + dst_storage.size(); ++p) all = all && *p == std::byte{0};
        for (std::byte* p = dst2 + 4 * blocks; p < dst2_storage.data() + dst2_storage.size(); ++p) all = all && *p == std::byte{0};
        CHECK(all);
        ++checked;
      }
    }
  }
  CHECK(checked == 2 * 5 * 4);
}

TEST_CASE("eight codes of a group are read low nibble first, whatever the alignment") {
  const std::uint8_t bytes[5] = {0x21, 0x43, 0x65, 0x87, 0xa9};
  CHECK(elem::load_u32_le(bytes) == 0x87654321u);
  CHECK(elem::load_u32_le(bytes + 1) == 0xa9876543u);
  for (std::uint32_t c = 0; c < 8; ++c) CHECK(elem::nibble(0x87654321u, c) == c + 1);
}

TEST_CASE("repack padding past K holds the block's zero-point code") {
  // Columns 0..2 valid (codes 1, 2, 3), the rest padding with zero point 9.
  const std::uint32_t word = elem::repack_group(0x00000321u, 3, 9.0f);
  CHECK(elem::repack_codes(0x76543210u) == 0x75316420u);
  // Nibble i holds column [0,2,4,6,1,3,5,7][i].
  const std::uint32_t expected_columns[8] = {1, 3, 9, 9, 2, 9, 9, 9};
  for (std::uint32_t i = 0; i < 8; ++i) CHECK(((word >> (4 * i)) & 0xf) == expected_columns[i]);
  // Unpacked float zero points round half to even and clamp.
  CHECK(((elem::repack_group(0, 0, 7.5f)) & 0xf) == 8);
  CHECK(((elem::repack_group(0, 0, 20.0f)) & 0xf) == 15);
  CHECK(((elem::repack_group(0, 0, -3.0f)) & 0xf) == 0);
}

TEST_CASE("whole-word repack equals the kernel_math word for every padding length") {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    const std::uint32_t codes = rng();
    const std::uint32_t valid = rng() % 9;
    const float zp = static_cast<float>(static_cast<int>(rng() % 40) - 4) * 0.5f;
    std::uint32_t columns[8];
    for (std::uint32_t c = 0; c < 8; ++c) columns[c] = c < valid ? elem::nibble(codes, c) : kmath::zero_point_code(zp);
    REQUIRE(elem::repack_group(codes, valid, zp) == kmath::repack_word(columns));
  }
}

TEST_CASE("the micro-block transposes move element (q, p) to (p, q)") {
  elem::Vec4 in[16];
  auto* bytes = reinterpret_cast<std::uint8_t*>(in);
  for (unsigned i = 0; i < sizeof in; ++i) bytes[i] = static_cast<std::uint8_t>(i * 7 + 3);
  const auto check = [&](auto element, unsigned v, auto transpose) {
    using T = decltype(element);
    for (unsigned p = 0; p < v; ++p) {
      const elem::Vec4 out = transpose(p);
      T got[16 / sizeof(T)];
      std::memcpy(got, &out, 16);
      for (unsigned q = 0; q < v; ++q) {
        T want;
        std::memcpy(&want, bytes + 16 * q + sizeof(T) * p, sizeof(T));
        CHECK(got[q] == want);
      }
    }
  };
  check(std::uint8_t{}, 16, [&](unsigned p) { return elem::transpose_micro<1>(in, p); });
  check(std::uint16_t{}, 8, [&](unsigned p) { return elem::transpose_micro<2>(in, p); });
  check(std::uint32_t{}, 4, [&](unsigned p) { return elem::transpose_micro<4>(in, p); });
  check(std::uint64_t{}, 2, [&](unsigned p) { return elem::transpose_micro<8>(in, p); });
}

TEST_CASE("the grid-stride cursor visits every (major, minor) once, in linear order") {
  for (std::uint64_t minor_count : {1ull, 3ull, 7ull, 64ull, 1000ull}) {
    for (std::uint32_t threads : {1u, 5u, 64u, 4096u}) {
      const elem::Cursor stride = elem::cursor_at(threads, minor_count);
      for (std::uint32_t t = 0; t < threads && t < 70; ++t) {
        std::uint64_t linear = t;
        for (elem::Cursor c = elem::cursor_at(t, minor_count); c.major < 9; elem::cursor_step(c, stride, minor_count)) {
          REQUIRE(c.major == linear / minor_count);
          REQUIRE(c.minor == linear % minor_count);
          linear += threads;
        }
      }
    }
  }
}
