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
  l.kind = Derivation::transpose;
  l.src_type = DataType::int4;
  CHECK(derivation_sizes(l).code() == ErrorCode::unsupported);
  l.src_type = DataType::float32;
  l.rows = 1ull << 40;
  l.cols = 1ull << 40;
  CHECK(derivation_sizes(l).code() == ErrorCode::overflow);
}
