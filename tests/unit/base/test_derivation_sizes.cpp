#include <ballast/derivation.hpp>
#include <doctest/doctest.h>

using namespace ballast;

TEST_CASE("int4 sizes follow the MatMulNBits layout, K not a multiple of block_size") {
  DerivationLaunch l;
  l.kind = Derivation::repack_int4;
  l.src_type = DataType::float16;
  l.rows = 3;   // N
  l.cols = 40;  // K -> 3 blocks of 16
  l.block_size = 16;
  l.zero_points = ZeroPoints::packed_u4;
  auto s = derivation_sizes(l);
  REQUIRE(s.ok());
  CHECK(s->src_bytes == 3 * 3 * 8);
  CHECK(s->scales_bytes == 3 * 3 * 2);
  CHECK(s->zero_point_bytes == 3 * 2);
  CHECK(s->dst_bytes == 3 * 5 * 4);
  CHECK(s->dst2_bytes == 3 * 3 * 4);
  l.kind = Derivation::dequant_int4;
  l.zero_points = ZeroPoints::unpacked;
  s = derivation_sizes(l);
  REQUIRE(s.ok());
  CHECK(s->zero_point_bytes == 3 * 3 * 2);
  CHECK(s->dst_bytes == 3 * 40 * 2);
}

TEST_CASE("bad launches are refused with the field named") {
  DerivationLaunch l;
  l.kind = Derivation::dequant_int4;
  l.src_type = DataType::float32;
  l.rows = 1;
  l.cols = 1;
  l.block_size = 24;
  auto s = derivation_sizes(l);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message.find("block_size") != std::string::npos);
  // MatMulNBits block sizes are powers of two from 16: 8 and 0 are refused,
  // 16 is the smallest taken.
  for (std::uint32_t bs : {0u, 8u, 16u}) {
    CAPTURE(bs);
    l.block_size = bs;
    auto b = derivation_sizes(l);
    CHECK(b.ok() == (bs == 16));
    if (!b.ok()) CHECK(b.error().message.find("block_size") != std::string::npos);
  }
  l.kind = Derivation::transpose;
  l.src_type = DataType::int4;
  CHECK(derivation_sizes(l).code() == ErrorCode::unsupported);
  l.src_type = DataType::float32;
  l.rows = 1ull << 40;
  l.cols = 1ull << 40;
  CHECK(derivation_sizes(l).code() == ErrorCode::overflow);
}

TEST_CASE("check_operand_alignment: operands aligned to their element size; zero pointers pass") {
  DerivationLaunch l;
  l.kind = Derivation::transpose;
  l.src_type = DataType::float32;
  l.rows = 2;
  l.cols = 3;
  CHECK(check_operand_alignment(l).ok());
  l.src = 0x1000;
  l.dst = 0x2000;
  CHECK(check_operand_alignment(l).ok());
  l.src = 0x1002;
  CHECK(derivation_sizes(l).ok());  // sizes do not look at pointers
  Status bad = check_operand_alignment(l);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.code() == ErrorCode::invalid_argument);
  CHECK(bad.error().message == "src: device pointer 0x1002 is not aligned to its 4-byte elements");

  DerivationLaunch q;
  q.kind = Derivation::dequant_int4;
  q.src_type = DataType::float16;
  q.rows = 1;
  q.cols = 16;
  q.block_size = 16;
  q.src = 0x1001;  // B is bytes: any address
  q.scales = 0x2002;
  q.zero_points = ZeroPoints::packed_u4;
  q.zero_point = 0x3003;
  q.dst = 0x4002;
  CHECK(check_operand_alignment(q).ok());
  q.zero_points = ZeroPoints::unpacked;
  CHECK(check_operand_alignment(q).error().message.rfind("zero_point:", 0) == 0);
  CHECK(derivation_operand_alignment(DataType::int4) == 1);
  CHECK(derivation_operand_alignment(DataType::float64) == 8);
}

TEST_CASE("int4 sizes near 2^64 columns: k_blocks and the repacked words never wrap to zero") {
  // ceil(K / block) used to be (K + block - 1) / block, which wraps for K
  // within a block of 2^64: a [1, 2^64 - 1] repack then sized every operand
  // as 0 bytes and "succeeded" without launching (fuzz_launch_validation).
  DerivationLaunch l;
  l.kind = Derivation::repack_int4;
  l.src_type = DataType::float16;
  l.rows = 1;
  l.cols = ~std::uint64_t{0};
  l.block_size = 16;
  auto s = derivation_sizes(l);
  REQUIRE(s.ok());
  CHECK(s->src_bytes == std::uint64_t{1} << 63);    // 2^60 blocks of 8 bytes
  CHECK(s->scales_bytes == std::uint64_t{1} << 61);
  CHECK(s->dst_bytes == std::uint64_t{1} << 63);    // 2^61 words
  CHECK(s->dst2_bytes == std::uint64_t{1} << 62);
  l.zero_points = ZeroPoints::packed_u4;
  s = derivation_sizes(l);
  REQUIRE(s.ok());
  CHECK(s->zero_point_bytes == std::uint64_t{1} << 59);
  l.cols = ~std::uint64_t{0} - 3;  // K + 7 wraps, K + 15 wraps
  s = derivation_sizes(l);
  REQUIRE(s.ok());
  CHECK(s->dst_bytes == std::uint64_t{1} << 63);
  l.src_type = DataType::float32;  // scales: 2^60 blocks x 4 bytes = 2^62; fine
  CHECK(derivation_sizes(l).ok());
  l.rows = 2;                      // rows x cols: past 2^64
  CHECK(derivation_sizes(l).code() == ErrorCode::overflow);
}
