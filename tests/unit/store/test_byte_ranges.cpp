#include "store/byte_ranges.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace ballast;
using ballast::store::complement_ranges;
using ballast::store::merge_ranges;
using ballast::store::range_inside;

TEST_CASE("merge_ranges unions overlapping, aliased and adjacent ranges, clipped to the limit") {
  std::vector<ByteRange> in = {{100, 50}, {0, 10}, {120, 50}, {100, 50}, {10, 5}, {300, 0}, {990, 100}, {2000, 5}};
  auto merged = merge_ranges(in, 1000);
  REQUIRE(merged.size() == 3);
  CHECK(merged[0] == ByteRange{0, 15});
  CHECK(merged[1] == ByteRange{100, 70});
  CHECK(merged[2] == ByteRange{990, 10});
}

TEST_CASE("merge_ranges never overflows on ranges whose end passes 2^64") {
  std::vector<ByteRange> in = {{10, UINT64_MAX}, {UINT64_MAX - 1, UINT64_MAX}};
  auto merged = merge_ranges(in, 64);
  REQUIRE(merged.size() == 1);
  CHECK(merged[0] == ByteRange{10, 54});
}

TEST_CASE("complement_ranges gives the gaps, including the orphaned prefix") {
  auto gaps = complement_ranges({{4096, 100}, {8192, 8}}, 10000);
  REQUIRE(gaps.size() == 3);
  CHECK(gaps[0] == ByteRange{0, 4096});
  CHECK(gaps[1] == ByteRange{4196, 8192 - 4196});
  CHECK(gaps[2] == ByteRange{8200, 1800});
  CHECK(complement_ranges({}, 0).empty());
  CHECK(complement_ranges({{0, 10}}, 10).empty());
  CHECK(complement_ranges({}, 7) == std::vector<ByteRange>{{0, 7}});
}

TEST_CASE("range_inside is overflow-safe") {
  CHECK(range_inside(0, 10, 10));
  CHECK(range_inside(10, 0, 10));
  CHECK_FALSE(range_inside(11, 0, 10));
  CHECK_FALSE(range_inside(5, 6, 10));
  CHECK_FALSE(range_inside(1, UINT64_MAX, 10));
  CHECK_FALSE(range_inside(UINT64_MAX, 2, 10));
}

TEST_CASE("merge_ranges on its edges: contained ranges, a range starting at the limit, one-byte gaps") {
  // A range inside another leaves the outer one whole.
  CHECK(merge_ranges({{0, 100}, {10, 5}}, 1000) == std::vector<ByteRange>{{0, 100}});
  CHECK(merge_ranges({{10, 5}, {0, 100}, {99, 1}}, 1000) == std::vector<ByteRange>{{0, 100}});
  // Adjacent: merged; one byte apart: not.
  CHECK(merge_ranges({{0, 10}, {10, 10}}, 1000) == std::vector<ByteRange>{{0, 20}});
  CHECK(merge_ranges({{0, 10}, {11, 10}}, 1000) == std::vector<ByteRange>{{0, 10}, {11, 10}});
  // A range starting exactly at the limit is outside; one starting a byte before keeps that byte.
  CHECK(merge_ranges({{0, 10}, {1000, 5}}, 1000) == std::vector<ByteRange>{{0, 10}});
  CHECK(merge_ranges({{0, 10}, {999, 5}}, 1000) == std::vector<ByteRange>{{0, 10}, {999, 1}});
  CHECK(merge_ranges({{1000, 5}}, 1000).empty());
}

TEST_CASE("complement_ranges finds gaps of one byte, inside and at both ends") {
  CHECK(complement_ranges({{1, 9}}, 10) == std::vector<ByteRange>{{0, 1}});             // first byte
  CHECK(complement_ranges({{0, 9}}, 10) == std::vector<ByteRange>{{9, 1}});             // last byte
  CHECK(complement_ranges({{0, 4}, {5, 5}}, 10) == std::vector<ByteRange>{{4, 1}});     // one in the middle
  CHECK(complement_ranges({{0, 4}, {4, 6}}, 10).empty());                               // adjacent: none
  CHECK(complement_ranges({{0, 10}}, 11) == std::vector<ByteRange>{{10, 1}});
}

TEST_CASE("total_length sums every range") {
  CHECK(ballast::store::total_length({}) == 0);
  CHECK(ballast::store::total_length({{0, 4}, {10, 6}, {100, 1}}) == 11);
}
