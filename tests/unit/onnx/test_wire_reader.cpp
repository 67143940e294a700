#include "onnx/wire_reader.hpp"
#include "unit/onnx/proto_builder.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace ballast;
using namespace ballast::onnx;
using ballast::testing::Proto;

namespace {
Bytes as_bytes(const std::vector<std::uint8_t>& v) { return std::as_bytes(std::span<const std::uint8_t>(v)); }

bool varint_of(std::vector<std::uint8_t> in, std::uint64_t& out, std::size_t& pos) {
  pos = 0;
  return read_varint(as_bytes(in), pos, out);
}
}  // namespace

TEST_CASE("varints: one to ten bytes, the tenth carrying only bit 63") {
  std::uint64_t v = 0;
  std::size_t pos = 0;
  CHECK(varint_of({0x00}, v, pos));
  CHECK(v == 0);
  CHECK(varint_of({0xac, 0x02}, v, pos));
  CHECK(v == 300);
  CHECK(pos == 2);
  CHECK(varint_of({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, v, pos));
  CHECK(v == UINT64_MAX);
  CHECK(varint_of({0x80, 0x00}, v, pos));  // non-minimal but valid protobuf
  CHECK(v == 0);
  CHECK_FALSE(varint_of({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, v, pos));  // overflows 64 bits
  CHECK_FALSE(varint_of({0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, v, pos));  // 11 bytes
  CHECK_FALSE(varint_of({0x80}, v, pos));  // truncated
  CHECK(pos == 0);
  CHECK_FALSE(varint_of({}, v, pos));
}

TEST_CASE("fields of every wire type decode with absolute offsets") {
  Proto p;
  p.varint(1, 150).fixed32(2, 0xdeadbeef).fixed64(3, 0x0102030405060708ull).str(4, "hey").varint(1000, 7);
  WireReader r(p.span(), 100);
  auto f1 = r.next();
  REQUIRE(f1.ok());
  CHECK(f1->number == 1);
  CHECK(f1->type == WireType::varint);
  CHECK(f1->value == 150);
  CHECK(f1->offset == 100);
  auto f2 = r.next();
  REQUIRE(f2.ok());
  CHECK(f2->type == WireType::fixed32);
  CHECK(f2->value == 0xdeadbeef);
  CHECK(f2->payload_offset == 100 + 3 + 1);
  auto f3 = r.next();
  REQUIRE(f3.ok());
  CHECK(f3->value == 0x0102030405060708ull);
  auto f4 = r.next();
  REQUIRE(f4.ok());
  CHECK(f4->type == WireType::len);
  CHECK(f4->text() == "hey");
  CHECK(f4->payload_offset == f4->offset + 2);
  auto f5 = r.next();
  REQUIRE(f5.ok());
  CHECK(f5->number == 1000);
  CHECK(r.at_end());
}

TEST_CASE("the reader refuses what the wire format forbids, naming the offset") {
  struct Case {
    const char* what;
    std::vector<std::uint8_t> bytes;
    std::uint64_t offset;
  };
  const Case cases[] = {
      {"group start", {0x0b}, 0},
      {"group end", {0x0c}, 0},
      {"wire type 6", {0x0e}, 0},
      {"wire type 7", {0x0f}, 0},
      {"field number 0", {0x00, 0x01}, 0},
      {"tag over 32 bits", {0x80, 0x80, 0x80, 0x80, 0x80, 0x01}, 0},
      {"truncated tag", {0x80}, 0},
      {"truncated varint value", {0x08, 0x80}, 1},
      {"overlong varint value", {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 1},
      {"truncated fixed32", {0x15, 0x01, 0x02}, 1},
      {"truncated fixed64", {0x09, 1, 2, 3, 4, 5, 6, 7}, 1},
      {"length past the end", {0x22, 0x05, 'a', 'b'}, 1},
      {"huge length", {0x22, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 1},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::vector<std::uint8_t> bytes = {0x08, 0x01};  // one good field first: offsets are absolute
    bytes.insert(bytes.end(), c.bytes.begin(), c.bytes.end());
    WireReader r(as_bytes(bytes), 1000);
    REQUIRE(r.next().ok());
    auto f = r.next();
    REQUIRE_FALSE(f.ok());
    CHECK(f.code() == ErrorCode::malformed);
    REQUIRE(f.error().offset.has_value());
    CHECK(*f.error().offset == 1002 + c.offset);
    // The truncations say which width was cut short.
    if (std::string_view(c.what).starts_with("truncated fixed"))
      CHECK_MESSAGE(f.error().message.find(c.what) != std::string::npos, f.error().message);
  }
}

TEST_CASE("expect_wire_type and packed varint counting") {
  Proto p;
  p.varint(8, 1).packed_varints(1, {1, 300, -1});
  WireReader r(p.span(), 0);
  auto f = r.next();
  REQUIRE(f.ok());
  auto s = expect_wire_type(*f, WireType::len, "TensorProto.name");
  CHECK(s.code() == ErrorCode::malformed);
  CHECK(s.error().message.find("TensorProto.name") != std::string::npos);
  CHECK(s.error().offset == 0u);
  auto packed = r.next();
  REQUIRE(packed.ok());
  CHECK(expect_wire_type(*packed, WireType::len, "dims").ok());
  CHECK(count_packed_varints(*packed, "dims").value() == 3);

  std::vector<std::uint8_t> bad = {0x0a, 0x02, 0x01, 0x80};  // second varint truncated inside the payload
  WireReader rb(as_bytes(bad), 0);
  auto fb = rb.next();
  REQUIRE(fb.ok());
  auto n = count_packed_varints(*fb, "dims");
  CHECK(n.code() == ErrorCode::malformed);
  CHECK(n.error().offset == 3u);
}
