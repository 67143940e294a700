#include "unit/onnx/load_helpers.hpp"

#include <cstring>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;
using Bytes8 = std::vector<std::uint8_t>;

TEST_CASE("raw_data of every dtype 1..24 is borrowed, sub-byte types packed two per byte") {
  for (int raw = 1; raw <= kMaxKnownDataType; ++raw) {
    const auto dtype = static_cast<DataType>(raw);
    if (dtype == DataType::string) continue;
    CAPTURE(dtype_name(dtype));
    const std::uint64_t size = *dtype_storage_bytes(dtype, 5);
    Bytes8 raw_bytes(size);
    for (std::size_t i = 0; i < size; ++i) raw_bytes[i] = static_cast<std::uint8_t>(i * 7 + 1);

    Proto t = tensor("w", raw, {5});
    raw_data(t, raw_bytes);
    Proto m = model_with({t});
    auto model = load_proto(m);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    const WeightRef& w = weight_named(*model, "w");
    CHECK(w.dtype == dtype);
    CHECK(w.dims == std::vector<std::int64_t>{5});
    CHECK(w.storage == WeightRef::Storage::inline_borrowed);
    CHECK(w.source == WeightSource::initializer);
    CHECK(points_into(w.inline_bytes, m.span()));
    CHECK(bytes_named(*model, "w") == raw_bytes);
    if (dtype_bits(dtype) == 4) CHECK(size == 3);

    Proto bad = tensor("w", raw, {5});
    raw_bytes.push_back(0);
    raw_data(bad, raw_bytes);
    Proto mb = model_with({bad});
    auto rejected = load_proto(mb);
    REQUIRE_FALSE(rejected.ok());
    CHECK(rejected.code() == ErrorCode::size_mismatch);
    CHECK(rejected.error().tensor == "w");
    CHECK(rejected.error().offset.has_value());
  }
}

TEST_CASE("packed float_data and double_data are borrowed; unpacked runs are owned with the same bytes") {
  Proto packed = tensor("packed", 1, {3});
  packed.packed_floats(4, {1.0f, -2.5f, 3.0f});
  Proto unpacked = tensor("unpacked", 1, {3});
  unpacked.f32(4, 1.0f).f32(4, -2.5f).f32(4, 3.0f);
  Proto split = tensor("split", 1, {3});  // two packed runs: legal, concatenated
  split.packed_floats(4, {1.0f}).packed_floats(4, {-2.5f, 3.0f});
  Proto dbl = tensor("dbl", 11, {2});
  dbl.packed_doubles(10, {0.5, -1e300});
  Proto dbl_unpacked = tensor("dbl_unpacked", 11, {1});
  std::uint64_t bits;
  double half = 0.5;
  std::memcpy(&bits, &half, 8);
  dbl_unpacked.fixed64(10, bits);
  Proto m = model_with({packed, unpacked, split, dbl, dbl_unpacked});
  auto model = load_proto(m);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());

  const float expected_f[3] = {1.0f, -2.5f, 3.0f};
  Bytes8 want(12);
  std::memcpy(want.data(), expected_f, 12);
  CHECK(weight_named(*model, "packed").storage == WeightRef::Storage::inline_borrowed);
  CHECK(points_into(weight_named(*model, "packed").inline_bytes, m.span()));
  CHECK(bytes_named(*model, "packed") == want);
  CHECK(weight_named(*model, "unpacked").storage == WeightRef::Storage::inline_owned);
  CHECK(weight_named(*model, "unpacked").owned != nullptr);
  CHECK(bytes_named(*model, "unpacked") == want);
  CHECK(weight_named(*model, "split").storage == WeightRef::Storage::inline_owned);
  CHECK(bytes_named(*model, "split") == want);

  const double expected_d[2] = {0.5, -1e300};
  Bytes8 want_d(16);
  std::memcpy(want_d.data(), expected_d, 16);
  CHECK(weight_named(*model, "dbl").storage == WeightRef::Storage::inline_borrowed);
  CHECK(bytes_named(*model, "dbl") == want_d);
  CHECK(bytes_named(*model, "dbl_unpacked") == Bytes8(want_d.begin(), want_d.begin() + 8));
}

TEST_CASE("complex types hold two floats or doubles per element") {
  Proto c64 = tensor("c64", 14, {2});
  c64.packed_floats(4, {1.0f, 2.0f, 3.0f, 4.0f});
  Proto c128 = tensor("c128", 15, {1});
  c128.packed_doubles(10, {1.0, 2.0});
  Proto short_c64 = tensor("short", 14, {2});
  short_c64.packed_floats(4, {1.0f, 2.0f});
  Proto m = model_with({c64, c128});
  auto model = load_proto(m);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  CHECK(bytes_named(*model, "c64").size() == 16);
  CHECK(bytes_named(*model, "c128").size() == 16);
  CHECK(weight_named(*model, "c64").storage == WeightRef::Storage::inline_borrowed);
  Proto ms = model_with({short_c64});
  auto bad = load_proto(ms);
  CHECK(bad.code() == ErrorCode::size_mismatch);
  CHECK(bad.error().tensor == "short");
}

TEST_CASE("int32_data carries every small type: low bits, bit patterns, 4-bit pairs") {
  struct Case {
    const char* name;
    int dtype;
    std::vector<std::int64_t> dims;
    std::vector<std::uint64_t> values;  // as written in int32_data (negatives sign-extended)
    Bytes8 expected;
  };
  auto neg = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  const Case cases[] = {
      {"int32", 6, {2}, {neg(-1), 0x12345678}, {0xff, 0xff, 0xff, 0xff, 0x78, 0x56, 0x34, 0x12}},
      {"int16", 5, {2}, {neg(-2), 300}, {0xfe, 0xff, 0x2c, 0x01}},
      {"uint16", 4, {1}, {65535}, {0xff, 0xff}},
      {"int8", 3, {3}, {neg(-1), 127, neg(-128)}, {0xff, 0x7f, 0x80}},
      {"uint8", 2, {2}, {255, 7}, {0xff, 0x07}},
      {"bool", 9, {3}, {1, 0, 5}, {1, 0, 1}},
      {"float16", 10, {2}, {0x3c00, 0xc000}, {0x00, 0x3c, 0x00, 0xc0}},
      {"bfloat16", 16, {2}, {0x3f80, 0xbf80}, {0x80, 0x3f, 0x80, 0xbf}},
      {"float8e4m3fn", 17, {2}, {0x7e, 0x01}, {0x7e, 0x01}},
      {"float8e4m3fnuz", 18, {1}, {0x80}, {0x80}},
      {"float8e5m2", 19, {2}, {0x3c, 0xfb}, {0x3c, 0xfb}},
      {"float8e5m2fnuz", 20, {1}, {0x7f}, {0x7f}},
      // 4-bit: one int32_data element per byte, two values per byte, low nibble first.
      {"uint4", 21, {3}, {0x21, 0x03}, {0x21, 0x03}},
      {"int4", 22, {4}, {0xf1, 0x87}, {0xf1, 0x87}},
      {"float4e2m1", 23, {2, 1}, {0x5a}, {0x5a}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Proto t;
    for (auto d : c.dims) t.sint(1, d);  // unpacked dims are valid too
    t.varint(2, static_cast<std::uint64_t>(c.dtype)).str(8, c.name).packed_u64(5, c.values);
    Proto m = model_with({t});
    auto model = load_proto(m);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    const WeightRef& w = weight_named(*model, c.name);
    CHECK(w.storage == WeightRef::Storage::inline_owned);
    CHECK(w.dims == c.dims);
    CHECK(bytes_named(*model, c.name) == c.expected);

    Proto short_t;  // one value too few
    short_t.varint(2, static_cast<std::uint64_t>(c.dtype)).str(8, c.name);
    for (auto d : c.dims) short_t.sint(1, d);
    short_t.packed_u64(5, std::vector<std::uint64_t>(c.values.begin(), c.values.end() - 1));
    Proto ms = model_with({short_t});
    auto bad = load_proto(ms);
    CHECK(bad.code() == ErrorCode::size_mismatch);
    CHECK(bad.error().tensor == c.name);
  }
}

TEST_CASE("int64_data and uint64_data decode into owned little-endian buffers") {
  Proto i64 = tensor("i64", 7, {2});
  i64.packed_varints(7, {-5, 7});
  Proto i64_unpacked = tensor("i64u", 7, {2});
  i64_unpacked.sint(7, -5).sint(7, 7);
  Proto u32 = tensor("u32", 12, {2});
  u32.packed_u64(11, {4294967295u, 1});
  Proto u64 = tensor("u64", 13, {1});
  u64.packed_u64(11, {UINT64_MAX});
  Proto m = model_with({i64, i64_unpacked, u32, u64});
  auto model = load_proto(m);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const Bytes8 want_i64 = {0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0, 0, 0, 0, 0};
  CHECK(bytes_named(*model, "i64") == want_i64);
  CHECK(bytes_named(*model, "i64u") == want_i64);
  CHECK(weight_named(*model, "i64").storage == WeightRef::Storage::inline_owned);
  CHECK(bytes_named(*model, "u32") == Bytes8{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0});
  CHECK(bytes_named(*model, "u64") == Bytes8(8, 0xff));
}

TEST_CASE("typed fields must match the dtype, and raw_data excludes them") {
  Proto wrong = tensor("wrong", 7, {1});
  wrong.packed_floats(4, {1.0f});
  Proto both = tensor("both", 1, {1});
  both.packed_floats(4, {1.0f});
  raw_data(both, {0, 0, 0x80, 0x3f});
  Proto two = tensor("two", 6, {1});
  two.packed_varints(5, {1}).packed_varints(7, {1});
  for (const Proto* t : {&wrong, &both, &two}) {
    Proto m = model_with({*t});
    auto r = load_proto(m);
    CHECK(r.code() == ErrorCode::malformed);
    CHECK_FALSE(r.error().tensor.empty());
  }
}

TEST_CASE("empty tensors need no data; non-empty ones do") {
  Proto empty = tensor("empty", 1, {0, 4});
  Proto scalar = tensor("scalar", 1, {});
  Proto m = model_with({empty});
  auto model = load_proto(m);
  REQUIRE(model.ok());
  CHECK(bytes_named(*model, "empty").empty());
  Proto ms = model_with({scalar});  // a scalar has one element and no data: wrong
  auto bad = load_proto(ms);
  CHECK(bad.code() == ErrorCode::size_mismatch);
  CHECK(bad.error().tensor == "scalar");
}

TEST_CASE("unknown, missing and segmented data types are refused by name") {
  Proto unknown = tensor("unknown", kMaxKnownDataType + 1, {1});
  Proto negative = tensor("negative", -1, {1});
  Proto missing;
  missing.packed_varints(1, {1}).str(8, "missing");
  Proto segmented = tensor("segmented", 1, {1});
  Proto seg;
  seg.varint(1, 0).varint(2, 1);
  segmented.msg(3, seg);
  for (const Proto* t : {&unknown, &negative, &missing, &segmented}) {
    Proto m = model_with({*t});
    auto r = load_proto(m);
    CHECK(r.code() == ErrorCode::unsupported);
    CHECK_FALSE(r.error().tensor.empty());
  }
}

TEST_CASE("string tensors are listed, not weights") {
  Proto s = tensor("labels", 8, {2});
  s.str(6, "cat").str(6, "dog");
  Proto f = tensor("f", 1, {1});
  f.packed_floats(4, {1.0f});
  Proto m = model_with({s, f});
  auto model = load_proto(m);
  REQUIRE(model.ok());
  REQUIRE(model->string_tensors().size() == 1);
  CHECK(model->string_tensors()[0].name == "labels");
  CHECK(model->string_tensors()[0].dims == std::vector<std::int64_t>{2});
  CHECK(model->store().weights().size() == 1);
  CHECK(model->weight_order().size() == 1);
}
