// Every derivation x source type x shape against the scalar reference.
#include "conformance/conformance.hpp"
#include "conformance/derivation_runner.hpp"

#include <vector>

using namespace conformance;
using ballast::DataType;
using ballast::Derivation;
using ballast::ZeroPoints;

namespace {

void run_all(const std::vector<DerivationCase>& cases) {
  for (const auto& c : cases) {
    INFO(c.label);
    const std::string failure = run_derivation_case(c);
    CHECK_MESSAGE(failure.empty(), c.label << ": " << failure);
  }
}

struct Shape {
  std::uint64_t rows, cols;
};

struct Int4Shape {
  std::uint64_t n, k;
  std::uint32_t block_size;
};

// 1x1, single rows and columns, odd sizes, K not a multiple of the block
// size, K smaller than one block, several blocks with a partial last one;
// and K a multiple of 8 and of 32 (a backend's packet paths, e.g. Vulkan's)
// with blocks of 16 (two per 32 columns), 32, and wider than K's last part.
const Int4Shape kInt4Shapes[] = {{1, 1, 16},   {1, 16, 16},   {3, 17, 16},  {2, 15, 16},  {5, 100, 32},
                                 {4, 64, 64},  {2, 33, 128},  {3, 300, 256}, {6, 129, 16}, {1, 7, 32},
                                 {9, 1000, 64}, {7, 8, 16},   {3, 96, 16},  {5, 160, 32}, {4, 288, 128},
                                 {33, 40, 16}};

}  // namespace

TEST_CASE("derivations: transpose of every element width") {
  LeakCheck leaks;
  std::vector<DerivationCase> cases;
  std::uint64_t seed = 100;
  for (DataType t : {DataType::uint8, DataType::float16, DataType::bfloat16, DataType::float32, DataType::int32,
                     DataType::float64, DataType::int64}) {
    for (Shape s : {Shape{1, 1}, Shape{1, 9}, Shape{9, 1}, Shape{7, 13}, Shape{33, 65}, Shape{128, 256},
                    Shape{257, 129}, Shape{64, 1}, Shape{3, 1031}}) {
      cases.push_back(transpose_case(t, s.rows, s.cols, ++seed));
    }
  }
  run_all(cases);
}

// A strided shard gathered on the device: columns at the left edge, in the
// middle and at the right edge, one column, every column, odd offsets, and
// long rows. A plugin whose table predates the kind (ABI 1.0 or 1.1: no
// kind_count, so 9 kinds) is refused it by the core, as unsupported: that
// refusal is the expected result there, and only there.
TEST_CASE("derivations: slice of every element width") {
  LeakCheck leaks;
  {
    const std::string failure = run_derivation_case(ballast::test_cases::slice_case(DataType::uint8, 2, 4, 1, 2, 999));
    if (failure.find("knows 9 derivation kinds, not this later one") != std::string::npos) {
      CHECK(failure.find("unsupported") != std::string::npos);
      MESSAGE("skipped: the plugin's ABI table predates slice; the core refused it: " << failure);
      return;
    }
  }
  std::vector<DerivationCase> cases;
  std::uint64_t seed = 1000;
  for (DataType t : {DataType::uint8, DataType::float16, DataType::float32, DataType::int64}) {
    for (auto [rows, src_cols, offset, cols] :
         {std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::uint64_t>{1, 1, 0, 1}, {1, 9, 4, 3},
          {7, 13, 0, 6}, {7, 13, 6, 7}, {33, 65, 13, 17}, {128, 256, 128, 128}, {4, 1031, 3, 1027}, {257, 2, 1, 1},
          {16, 4096, 1024, 1024}})
      cases.push_back(ballast::test_cases::slice_case(t, rows, src_cols, offset, cols, ++seed));
  }
  run_all(cases);
}

TEST_CASE("derivations: to_f16 from float and bfloat16") {
  LeakCheck leaks;
  std::vector<DerivationCase> cases;
  std::uint64_t seed = 200;
  for (DataType t : {DataType::float32, DataType::bfloat16}) {
    for (Shape s : {Shape{1, 1}, Shape{1, 7}, Shape{3, 333}, Shape{256, 257}, Shape{1, 65537}}) {
      cases.push_back(to_f16_case(t, s.rows, s.cols, false, ++seed));
      cases.push_back(to_f16_case(t, s.rows, s.cols, true, ++seed));
    }
  }
  run_all(cases);
}

TEST_CASE("derivations: every int4 kind, every scale type and zero-point form") {
  LeakCheck leaks;
  std::vector<DerivationCase> cases;
  std::uint64_t seed = 300;
  // The family's kinds (dequant_int4, repack_int4) and scale types from the
  // kind table, so a kind added to it is run here as it is added.
  for (const ballast::kinds::Kind& row : ballast::kinds::kTable) {
    if (!row.blocked) continue;
    const Derivation kind = row.kind;
    for (int ti = 0; ti < row.type_count; ++ti) {
      const DataType scales = row.types[ti];
      for (ZeroPoints zp : {ZeroPoints::absent, ZeroPoints::packed_u4, ZeroPoints::unpacked}) {
        for (const auto& s : kInt4Shapes) cases.push_back(int4_case(kind, scales, zp, s.n, s.k, s.block_size, false, ++seed));
        cases.push_back(int4_case(kind, scales, zp, 5, 77, 16, true, ++seed));
        cases.push_back(int4_case(kind, scales, zp, 5, 96, 16, true, ++seed));
      }
    }
  }
  run_all(cases);
}

TEST_CASE("derivations: quant_int8 from float and float16") {
  LeakCheck leaks;
  std::vector<DerivationCase> cases;
  std::uint64_t seed = 400;
  for (DataType t : {DataType::float32, DataType::float16}) {
    for (Shape s : {Shape{1, 1}, Shape{1, 7}, Shape{2, 1}, Shape{5, 33}, Shape{17, 1000}, Shape{64, 4096}, Shape{3, 16},
                    Shape{9, 2064}}) {
      cases.push_back(quant_int8_case(t, s.rows, s.cols, false, ++seed));
    }
    cases.push_back(quant_int8_case(t, 8, 37, true, ++seed));
    cases.push_back(quant_int8_case(t, 8, 48, true, ++seed));
    cases.push_back(quant_int8_case(t, 40, 1024, true, ++seed));
  }
  run_all(cases);
}

// The sharded derive's quant_int8 of a row-parallel weight: each row's
// maximum given (the ranks' all-reduced maxima), the codes and scales
// quant_int8's formula from it; maxima equal to, above and below the rows'
// own, and negative, NaN, zero, infinite and subnormal ones.
TEST_CASE("derivations: quant_int8_given_max from float and float16") {
  LeakCheck leaks;
  std::vector<DerivationCase> cases;
  std::uint64_t seed = 700;
  for (DataType t : {DataType::float32, DataType::float16}) {
    for (Shape s : {Shape{1, 1}, Shape{2, 7}, Shape{5, 33}, Shape{17, 1000}, Shape{64, 4096}, Shape{3, 16}})
      cases.push_back(ballast::test_cases::quant_int8_given_max_case(t, s.rows, s.cols, false, ++seed));
    cases.push_back(ballast::test_cases::quant_int8_given_max_case(t, 8, 37, true, ++seed));
    cases.push_back(ballast::test_cases::quant_int8_given_max_case(t, 16, 48, true, ++seed));
  }
  run_all(cases);
}

TEST_CASE("derivations: every GGUF kind with every block type it reads") {
  LeakCheck leaks;
  std::vector<DerivationCase> cases;
  std::uint64_t seed = 450;
  // The family's kinds and their types from the kind table (dequant_gguf and
  // dequant_gguf_f32: every GGUF type; repack_gguf_int4: Q4_0 and Q4_1).
  for (const ballast::kinds::Kind& k : ballast::kinds::kTable) {
    if (!k.gguf_blocks) continue;
    for (int i = 0; i < k.type_count; ++i) {
      const ballast::kinds::GgufBlock& b = *ballast::kinds::gguf_block(k.types[i]);
      // One block; odd rows of a few blocks; a row of 8192 elements; and
      // 1x1 of a plain float type.
      for (Shape s : {Shape{1, 1}, Shape{7, 3}, Shape{2, std::uint64_t{8192} / b.elements}, Shape{33, 2}})
        cases.push_back(gguf_case(k.kind, b.type, s.rows, s.cols, false, ++seed));
      cases.push_back(gguf_case(k.kind, b.type, 5, 3, true, ++seed));
    }
  }
  run_all(cases);
}

TEST_CASE("derivations: large shapes (4096 x 4096)") {
  LeakCheck leaks;
  constexpr std::uint64_t kN = 4096;
  constexpr std::uint64_t kBand = 128;  // rows compared with the reference at the start, middle and end
  auto banded = [](DerivationCase c) {
    c.verify_row_bands = kBand;
    return c;
  };
  SUBCASE("transpose float 4096x4096") { run_all({transpose_case(DataType::float32, kN, kN, 501)}); }
  SUBCASE("transpose float16 4095x4099") { run_all({transpose_case(DataType::float16, kN - 1, kN + 3, 502)}); }
  SUBCASE("to_f16 4096x4096") { run_all({banded(to_f16_case(DataType::float32, kN, kN, true, 503))}); }
  SUBCASE("dequant_int4 4096x4096") {
    run_all({banded(int4_case(Derivation::dequant_int4, DataType::float16, ZeroPoints::packed_u4, kN, kN, 32, false, 504))});
  }
  SUBCASE("repack_int4 4096x4101") {
    run_all({banded(int4_case(Derivation::repack_int4, DataType::float32, ZeroPoints::unpacked, kN, kN + 5, 128, false, 505))});
  }
  SUBCASE("dequant_gguf q4_k 4096x4096") {
    run_all({banded(gguf_case(Derivation::dequant_gguf, DataType::q4_k, kN, kN / 256, false, 507))});
  }
  SUBCASE("quant_int8 4096x4096") { run_all({banded(quant_int8_case(DataType::float32, kN, kN, false, 506))}); }
}
