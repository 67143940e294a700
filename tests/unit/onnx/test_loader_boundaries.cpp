// Every range check of the loader on its boundary: exactly at the limit is
// accepted, one past it is refused with the typed error. (An off-by-one in
// a bounds check survives every test that stays far from the boundary.)
#include "onnx/graph_decoder.hpp"
#include "onnx/wire_reader.hpp"
#include "unit/onnx/external_fixture.hpp"

#include <ballast/dtype.hpp>

#include <functional>
#include <string>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;

namespace {

constexpr std::uint64_t kBlob = 64;  // bytes in blob.bin

// A uint8 tensor (1 byte per element) so lengths and element counts agree.
constexpr int kUint8 = 2;

Proto f32_pair(std::string_view name) {
  Proto t = tensor(name, 1, {2});
  raw_data(t, {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40});
  return t;
}

}  // namespace

TEST_CASE("external data: a range ending exactly at the end of its file is accepted, one byte more is refused") {
  ScratchDir dir("boundary-ext");
  dir.write_pattern("blob.bin", kBlob);
  struct Case {
    const char* what;
    std::int64_t elements;
    std::uint64_t offset;
    std::optional<std::uint64_t> length;
    bool accepted;
  };
  const Case cases[] = {
      {"whole file", kBlob, 0, std::nullopt, true},
      {"whole file, length given", kBlob, 0, kBlob, true},
      {"whole file plus one", kBlob + 1, 0, std::nullopt, false},
      {"last byte", 1, kBlob - 1, std::nullopt, true},
      {"last byte, length given", 1, kBlob - 1, 1, true},
      {"one byte starting at the end", 1, kBlob, std::nullopt, false},
      {"tail ending at the end", 8, kBlob - 8, std::nullopt, true},
      {"tail ending one past the end", 8, kBlob - 7, std::nullopt, false},
      {"tail ending one past the end, length given", 8, kBlob - 7, 8, false},
      {"empty tensor at the end", 0, kBlob, std::nullopt, true},
      {"empty tensor one past the end", 0, kBlob + 1, std::nullopt, false},
      {"offset at UINT64_MAX, one byte", 1, UINT64_MAX, std::nullopt, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto r = load_written(dir, {external_tensor("t", c.elements, at("blob.bin", c.offset, c.length), kUint8)});
    if (c.accepted) {
      REQUIRE_MESSAGE(r.ok(), r.error().to_string());
      const auto bytes = bytes_named(*r, "t");
      REQUIRE(bytes.size() == static_cast<std::size_t>(c.elements));
      for (std::size_t i = 0; i < bytes.size(); ++i) CHECK(bytes[i] == (c.offset + i) % 251);
    } else {
      REQUIRE_FALSE(r.ok());
      CHECK(r.code() == ErrorCode::out_of_bounds);
      CHECK(r.error().tensor == "t");
      CHECK(r.error().offset == c.offset);
    }
  }
}

TEST_CASE("external data: a float tensor whose last element ends at the end of the file") {
  ScratchDir dir("boundary-ext-f32");
  dir.write_pattern("blob.bin", kBlob);
  CHECK(load_written(dir, {external_tensor("t", 4, at("blob.bin", kBlob - 16))}).ok());
  auto r = load_written(dir, {external_tensor("t", 4, at("blob.bin", kBlob - 15))});
  CHECK(r.code() == ErrorCode::out_of_bounds);
  CHECK(r.error().to_string().find("past the end") != std::string::npos);
}

TEST_CASE("max_tensor_elements: exactly the limit is accepted, one more is refused") {
  for (std::uint64_t limit : {std::uint64_t{1}, std::uint64_t{10}, std::uint64_t{4096}}) {
    CAPTURE(limit);
    LoadOptions o;
    o.max_tensor_elements = limit;
    Proto at_limit = tensor("t", kUint8, {static_cast<std::int64_t>(limit)});
    raw_data(at_limit, std::vector<std::uint8_t>(limit, 7));
    Proto m = model_with({at_limit});
    auto r = load_proto(m, ".", o);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    CHECK(bytes_named(*r, "t").size() == limit);

    Proto over = tensor("t", kUint8, {static_cast<std::int64_t>(limit + 1)});
    raw_data(over, std::vector<std::uint8_t>(limit + 1, 7));
    Proto m2 = model_with({over});
    auto refused = load_proto(m2, ".", o);
    CHECK(refused.code() == ErrorCode::overflow);
    CHECK(refused.error().message.find("max_tensor_elements") != std::string::npos);
  }
  // The default limit, 2^40, on an external tensor (checked before its file is opened).
  ScratchDir dir("boundary-elements");
  CHECK(load_written(dir, {external_tensor("t", std::int64_t{1} << 40, at("missing.bin", 0), kUint8)}).code() ==
        ErrorCode::not_found);
  CHECK(load_written(dir, {external_tensor("t", (std::int64_t{1} << 40) + 1, at("missing.bin", 0), kUint8)}).code() ==
        ErrorCode::overflow);
}

TEST_CASE("dims products: 2^64 - 1 elements is a number, 2^64 overflows") {
  LoadOptions unlimited;
  unlimited.max_tensor_elements = UINT64_MAX;
  auto load_dims = [&](std::vector<std::int64_t> dims) {
    Proto t;
    for (auto d : dims) t.sint(1, d);
    t.varint(2, kUint8).str(8, "d");
    raw_data(t, {1, 2, 3, 4});
    Proto m = model_with({t});
    auto r = load_proto(m, ".", unlimited);
    REQUIRE_FALSE(r.ok());
    return r.error();
  };
  // 4294967297 * 4294967295 = 2^64 - 1: the product fits, the 4 raw bytes do not match it.
  const Error fits = load_dims({4294967297LL, 4294967295LL});
  CHECK(fits.code == ErrorCode::size_mismatch);
  // 2^32 * 2^32 = 2^64: one past.
  const Error over = load_dims({std::int64_t{1} << 32, std::int64_t{1} << 32});
  CHECK(over.code == ErrorCode::overflow);
  CHECK(over.message.find("overflows") != std::string::npos);
  // A zero dim makes any product zero, but a negative dim is still refused.
  CHECK(load_dims({0, std::int64_t{1} << 62, std::int64_t{1} << 62}).code == ErrorCode::size_mismatch);
  CHECK(load_dims({0, -1}).code == ErrorCode::malformed);
  // An element count of f32 whose byte count overflows (2^62 elements x 4 bytes = 2^64).
  ScratchDir dir("boundary-bytes");
  auto r = load_written(dir, {external_tensor("t", std::int64_t{1} << 62, at("missing.bin", 0))}, unlimited);
  CHECK(r.code() == ErrorCode::overflow);
  auto fits_bytes = load_written(dir, {external_tensor("t", (std::int64_t{1} << 62) - 1, at("missing.bin", 0))}, unlimited);
  CHECK(fits_bytes.code() == ErrorCode::not_found);
}

TEST_CASE("subgraph nesting: exactly kMaxGraphDepth levels load, one more is refused") {
  auto nested = [](unsigned levels) {
    Proto g = graph({}, {f32_pair("leaf")});
    for (unsigned i = 0; i < levels; ++i) {
      Proto outer;
      outer.msg(1, node("If", {"c"}, {"o" + std::to_string(i)}, {attribute_graph("then_branch", g)}));
      g = outer;
    }
    return model(g);
  };
  const unsigned cap = ballast::onnx::kMaxGraphDepth;
  REQUIRE(cap == 64);  // the documented limit
  Proto at_cap = nested(cap);
  auto ok = load_proto(at_cap);
  REQUIRE_MESSAGE(ok.ok(), ok.error().to_string());
  unsigned deepest = 0;
  for (const NodeInfo& n : ok->nodes()) deepest = std::max(deepest, n.depth);
  CHECK(deepest == cap - 1);
  Proto past = nested(cap + 1);
  auto refused = load_proto(past);
  CHECK(refused.code() == ErrorCode::malformed);
  CHECK(refused.error().message.find("nested deeper than 64") != std::string::npos);
}

TEST_CASE("data_type: the highest known type is accepted, the next is unsupported") {
  auto with_type = [](std::int32_t dtype) {
    Proto t = tensor("t", static_cast<int>(dtype), {2});
    const auto bytes = dtype_storage_bytes(static_cast<DataType>(dtype), 2);
    raw_data(t, std::vector<std::uint8_t>(bytes.value_or(1), 0));
    return model_with({t});
  };
  Proto top = with_type(kMaxKnownDataType);
  auto ok = load_proto(top);
  CHECK_MESSAGE(ok.ok(), ok.error().to_string());
  Proto next = with_type(kMaxKnownDataType + 1);
  auto refused = load_proto(next);
  CHECK(refused.code() == ErrorCode::unsupported);
  CHECK(refused.error().message.find("unknown data_type " + std::to_string(kMaxKnownDataType + 1)) != std::string::npos);
}

TEST_CASE("wire format limits: the largest field number, a ten-byte varint and a length equal to what remains") {
  using namespace ballast::onnx;
  auto read_one = [](std::vector<std::uint8_t> bytes) {
    WireReader r(std::as_bytes(std::span<const std::uint8_t>(bytes)), 0);
    return r.next();
  };
  // Field number 2^29 - 1 (the protobuf maximum), varint type: tag 0xfffffff8 in five bytes.
  auto top = read_one({0xf8, 0xff, 0xff, 0xff, 0x0f, 0x01});
  REQUIRE(top.ok());
  CHECK(top->number == ballast::onnx::detail::kMaxFieldNumber);
  // Field number 2^29: its tag no longer fits in 32 bits.
  auto past = read_one({0x80, 0x80, 0x80, 0x80, 0x10, 0x01});
  REQUIRE_FALSE(past.ok());
  CHECK(past.code() == ErrorCode::malformed);
  // A length that consumes exactly the rest, and one byte more.
  auto exact = read_one({0x0a, 0x03, 'a', 'b', 'c'});
  REQUIRE(exact.ok());
  CHECK(exact->payload.size() == 3);
  auto over = read_one({0x0a, 0x04, 'a', 'b', 'c'});
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().message.find("claims 4 bytes but only 3 remain") != std::string::npos);
  // fixed32 / fixed64 with exactly their width left, and one byte short.
  CHECK(read_one({0x0d, 1, 2, 3, 4}).ok());
  CHECK_FALSE(read_one({0x0d, 1, 2, 3}).ok());
  CHECK(read_one({0x09, 1, 2, 3, 4, 5, 6, 7, 8}).ok());
  CHECK_FALSE(read_one({0x09, 1, 2, 3, 4, 5, 6, 7}).ok());
  // The tenth varint byte may carry bit 63 only.
  auto ten = read_one({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01});
  REQUIRE(ten.ok());
  CHECK(ten->value == UINT64_MAX);
  CHECK_FALSE(read_one({0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}).ok());
  // A decimal offset of exactly 2^64 - 1 is a number (then out of bounds); 2^64 is an overflow.
  ScratchDir dir("boundary-decimal");
  dir.write_pattern("blob.bin", kBlob);
  auto max_offset = load_written(
      dir, {external_tensor("t", 1, Entries{{"location", "blob.bin"}, {"offset", "18446744073709551615"}}, kUint8)});
  CHECK(max_offset.code() == ErrorCode::out_of_bounds);
  auto past_max = load_written(
      dir, {external_tensor("t", 1, Entries{{"location", "blob.bin"}, {"offset", "18446744073709551616"}}, kUint8)});
  CHECK(past_max.code() == ErrorCode::overflow);
  // Nineteen digits take the fast path, twenty the checked one: both parse.
  auto nineteen = load_written(
      dir, {external_tensor("t", 1, Entries{{"location", "blob.bin"}, {"offset", "0000000000000000063"}}, kUint8)});
  CHECK_MESSAGE(nineteen.ok(), nineteen.error().to_string());
  auto twenty = load_written(
      dir, {external_tensor("t", 1, Entries{{"location", "blob.bin"}, {"offset", "00000000000000000063"}}, kUint8)});
  CHECK_MESSAGE(twenty.ok(), twenty.error().to_string());
}

TEST_CASE("path safety on its boundaries: names that only look like traversal are accepted") {
  ScratchDir dir("boundary-path");
  dir.write_pattern("..blob.bin", kBlob);
  dir.write_pattern("blob...bin", kBlob);
  dir.write_pattern("a../b.bin", kBlob);
  for (const char* ok_name : {"..blob.bin", "blob...bin", "a../b.bin", "./blob...bin"}) {
    CAPTURE(ok_name);
    auto r = load_written(dir, {external_tensor("t", 4, at(ok_name, 0), kUint8)});
    CHECK_MESSAGE(r.ok(), r.error().to_string());
  }
  for (const char* bad : {"..", "../", "a/..", "a\\..", "..\\blob.bin", "\\blob.bin", "z:blob.bin", "Z:/blob.bin", "c:d.bin"}) {
    CAPTURE(bad);
    CHECK(load_written(dir, {external_tensor("t", 4, at(bad, 0), kUint8)}).code() == ErrorCode::path_escapes);
  }
  // A NUL byte would cut the name short at the system call: refused.
  auto nul = load_written(dir, {external_tensor("t", 4, at(std::string("..blob.bin\0x", 12), 0), kUint8)});
  CHECK(nul.code() == ErrorCode::malformed);
  CHECK(nul.error().message.find("NUL") != std::string::npos);
  // The model directory itself is not a file inside it.
  CHECK_FALSE(load_written(dir, {external_tensor("t", 4, at(".", 0), kUint8)}).ok());
}
