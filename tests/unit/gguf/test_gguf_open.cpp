// GGUF files and split sets through open_model (public API): weights by
// name with ne reversed into dims, zero-copy from one mapping per file, the
// metadata as typed text, the accounting (header, padding and gaps), and
// the refusals that need more than one file.
#include "unit/gguf/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/dtype.hpp>
#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include <bit>
#include <cstring>

using namespace ballast;
using namespace ballast::testing;

namespace {

const ModelMetadata* find(const Model& m, std::string_view key) {
  for (const ModelMetadata& e : m.metadata())
    if (e.key == key) return &e;
  return nullptr;
}

GgufBytes f32_bits(float v) { return u32(std::bit_cast<std::uint32_t>(v)); }
GgufBytes f64_bits(double v) { return u64(std::bit_cast<std::uint64_t>(v)); }

// A file with every metadata type and three tensors: an F32 [2, 8] at 0, a
// Q4_0 [3, 64] (6 blocks of 18 bytes) at 64, and an F16 [4] placed one
// alignment unit further than it needs (a gap no tensor covers).
GgufBytes typed_file(std::uint32_t version = 3) {
  std::vector<GgufBytes> kvs = {
      kv_str("general.architecture", "llama"),
      kv("u8", kGU8, {200}),
      kv("i8", kGI8, {0xfb}),
      kv("u16", kGU16, {0x34, 0x12}),
      kv("i16", kGI16, {0xff, 0xff}),
      kv("u32", kGU32, u32(4000000000u)),
      kv("i32", kGI32, u32(static_cast<std::uint32_t>(-7))),
      kv("f32", kGF32, f32_bits(0.1f)),
      kv("t", kGBool, {1}),
      kv("f", kGBool, {0}),
      kv("u64", kGU64, u64(UINT64_MAX)),
      kv("i64", kGI64, u64(static_cast<std::uint64_t>(INT64_MIN))),
      kv("f64", kGF64, f64_bits(1e300)),
      kv_str("name", "caf\xc3\xa9"),
      kv("tokens", kGArray, array(kGString, 3, gstr("a") + gstr("bb") + gstr(""))),
      kv("nested", kGArray, array(kGArray, 2, array(kGU8, 1, {1}) + array(kGU8, 0, {}))),
      kv("empty", kGArray, array(kGF32, 0, {})),
  };
  std::vector<GgufBytes> infos = {tinfo("a", {8, 2}, kF32, 0), tinfo("q", {64, 3}, kQ4_0, 64),
                                  tinfo("h", {4}, kF16, 64 + 128 + 32)};
  return gguf_file(kvs, infos, 64 + 128 + 32 + 8, 32, version);
}

}  // namespace

TEST_CASE("a GGUF file: weights, dims, metadata as typed text, accounting") {
  ScratchDir dir("gguf-open");
  const GgufBytes bytes = typed_file();
  const auto path = dir.write("m.gguf", bytes);
  auto m = open_model(path);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->format() == ModelFormat::gguf);
  CHECK(model_format_name(m->format()) == "gguf");
  CHECK(detect_model_format(path).value() == ModelFormat::gguf);
  REQUIRE(m->weight_order().size() == 3);
  CHECK(m->value_name(m->weight_order()[0]) == "a");

  const WeightRef* a = m->weight("a");
  const WeightRef* q = m->weight("q");
  const WeightRef* h = m->weight("h");
  REQUIRE(a != nullptr);
  REQUIRE(q != nullptr);
  REQUIRE(h != nullptr);
  CHECK(a->dtype == DataType::float32);
  CHECK(a->dims.to_vector() == std::vector<std::int64_t>{2, 8});  // ne {8, 2}: the innermost first
  CHECK(q->dtype == DataType::q4_0);
  CHECK(q->dims.to_vector() == std::vector<std::int64_t>{3, 64});
  CHECK(q->byte_length() == 3 * 2 * 18);
  CHECK(h->dtype == DataType::float16);
  CHECK(dtype_gguf_name(q->dtype) == "Q4_0");

  // Offsets are absolute: the data section starts at the header rounded up
  // to 32, and each tensor's bytes are the file's own (zero-copy).
  const std::uint64_t data_start = a->external->offset;
  CHECK(data_start % 32 == 0);
  CHECK(q->external->offset == data_start + 64);
  CHECK(h->external->offset == data_start + 224);
  auto view = m->store().bytes(*q);
  REQUIRE(view.has_value());
  CHECK(std::memcmp(view->data(), bytes.data() + data_start + 64, 108) == 0);

  // mapped = header + referenced + unreferenced: the padding after the
  // tensor infos, and the bytes between q and h, are dead.
  const auto referenced = m->store().referenced_weight_bytes();
  CHECK(referenced.total == 64 + 108 + 8);
  const std::uint64_t header = m->store().format_header_bytes();
  CHECK(header > 24);
  CHECK(header <= data_start);
  CHECK(data_start - header < 32);
  CHECK(m->store().unreferenced_external_bytes(referenced) == (data_start - header) + (224 - 64 - 108));
  CHECK(header + referenced.total + m->store().unreferenced_external_bytes(referenced) == bytes.size());

  struct Want {
    const char* key;
    const char* type;
    const char* value;
    std::uint64_t count = 0;
  };
  const Want want[] = {
      {"general.architecture", "string", "llama"},
      {"u8", "uint8", "200"},
      {"i8", "int8", "-5"},
      {"u16", "uint16", "4660"},
      {"i16", "int16", "-1"},
      {"u32", "uint32", "4000000000"},
      {"i32", "int32", "-7"},
      {"f32", "float32", "0.1"},
      {"t", "bool", "true"},
      {"f", "bool", "false"},
      {"u64", "uint64", "18446744073709551615"},
      {"i64", "int64", "-9223372036854775808"},
      {"f64", "float64", "1e+300"},
      {"name", "string", "caf\xc3\xa9"},
      {"tokens", "array[string]", "", 3},
      {"nested", "array[array]", "", 2},
      {"empty", "array[float32]", "", 0},
  };
  REQUIRE(m->metadata().size() == std::size(want));
  for (const Want& w : want) {
    CAPTURE(w.key);
    const ModelMetadata* e = find(*m, w.key);
    REQUIRE(e != nullptr);
    CHECK(e->file == "m.gguf");
    CHECK(e->type == w.type);
    CHECK(e->value == w.value);
    CHECK(e->count == w.count);
  }
}

TEST_CASE("GGUF v2 reads as v3 does; a file with no tensors needs no data section") {
  ScratchDir dir("gguf-v2");
  auto m = open_model(dir.write("v2.gguf", typed_file(2)));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(m->weight_order().size() == 3);
  auto empty = open_model(dir.write("empty.gguf", ghead(0, 1) + kv_str("general.name", "x")));
  REQUIRE_MESSAGE(empty.ok(), empty.error().to_string());
  CHECK(empty->weight_order().empty());
  CHECK(empty->metadata().size() == 1);
}

namespace {

// Part `no` (1-based) of a `count`-part split set holding `tensors` in all.
GgufBytes part(std::uint64_t no, std::uint64_t count, std::uint64_t tensors, const std::vector<std::string>& names,
               std::int64_t split_no = -1) {
  std::vector<GgufBytes> kvs = {kv("split.no", kGU16, {static_cast<std::uint8_t>(split_no < 0 ? no - 1 : split_no), 0}),
                                kv("split.count", kGU16, {static_cast<std::uint8_t>(count), 0}),
                                kv("split.tensors.count", kGI32, u32(static_cast<std::uint32_t>(tensors)))};
  if (no == 1) kvs.push_back(kv_str("general.architecture", "llama"));
  std::vector<GgufBytes> infos;
  for (std::size_t i = 0; i < names.size(); ++i) infos.push_back(tinfo(names[i], {8}, kF32, 32 * i));
  return gguf_file(kvs, infos, 32 * names.size());
}

}  // namespace

TEST_CASE("a GGUF split set opens as one model, from any of its parts") {
  ScratchDir dir("gguf-split");
  dir.write("m-00001-of-00003.gguf", part(1, 3, 4, {"a", "b"}));
  dir.write("m-00002-of-00003.gguf", part(2, 3, 4, {"c"}));
  dir.write("m-00003-of-00003.gguf", part(3, 3, 4, {"d"}));
  for (const char* first : {"m-00001-of-00003.gguf", "m-00002-of-00003.gguf"}) {
    CAPTURE(first);
    auto m = open_model(dir / first);
    REQUIRE_MESSAGE(m.ok(), m.error().to_string());
    REQUIRE(m->weight_order().size() == 4);
    CHECK(m->value_name(m->weight_order()[0]) == "a");  // part order, whichever part was named
    CHECK(m->value_name(m->weight_order()[3]) == "d");
    CHECK(m->store().mapping_count() == 3);
    CHECK(m->weight("c")->external->location() == "m-00002-of-00003.gguf");
    const ModelMetadata* arch = find(*m, "general.architecture");
    REQUIRE(arch != nullptr);
    CHECK(arch->file == "m-00001-of-00003.gguf");
  }
}

TEST_CASE("split sets that do not add up are refused, naming the part") {
  ScratchDir dir("gguf-split-bad");
  auto refused = [&](const char* sub, std::vector<std::pair<std::string, GgufBytes>> files, ErrorCode code,
                     const char* says) {
    CAPTURE(sub);
    for (auto& [name, bytes] : files) dir.write(std::string(sub) + "/" + name, bytes);
    auto m = open_model(dir / sub / files.front().first);
    REQUIRE_FALSE(m.ok());
    CHECK(m.error().code == code);
    CHECK_MESSAGE(m.error().to_string().find(says) != std::string::npos, m.error().to_string());
  };
  refused("missing", {{"m-00001-of-00002.gguf", part(1, 2, 2, {"a"})}}, ErrorCode::not_found,
          "m-00002-of-00002.gguf");
  refused("count", {{"m-00001-of-00002.gguf", part(1, 2, 3, {"a"})}, {"m-00002-of-00002.gguf", part(2, 2, 3, {"b"})}},
          ErrorCode::malformed, "split.tensors.count says 3");
  // Parts that disagree on split.tensors.count are refused from either part
  // (opened from the first, the sum matched its count and was taken).
  for (const char* opened : {"m-00001-of-00002.gguf", "m-00002-of-00002.gguf"}) {
    CAPTURE(opened);
    dir.write(std::string("disagree/m-00001-of-00002.gguf"), part(1, 2, 2, {"a"}));
    dir.write(std::string("disagree/m-00002-of-00002.gguf"), part(2, 2, 3, {"b"}));
    auto m = open_model(dir / "disagree" / opened);
    REQUIRE_FALSE(m.ok());
    CHECK(m.error().code == ErrorCode::malformed);
    CHECK_MESSAGE(m.error().to_string().find("split.tensors.count") != std::string::npos, m.error().to_string());
  }
  // No split.tensors.count at all is said so (not "says 0").
  const auto untallied = [](std::uint8_t no) {
    return gguf_file({kv("split.no", kGU16, {no, 0}), kv("split.count", kGU16, {2, 0})},
                     {tinfo(no == 0 ? "a" : "b", {8}, kF32, 0)}, 32);
  };
  refused("untallied", {{"m-00001-of-00002.gguf", untallied(0)}, {"m-00002-of-00002.gguf", untallied(1)}},
          ErrorCode::malformed, "there is no split.tensors.count");
  refused("no", {{"m-00001-of-00002.gguf", part(1, 2, 2, {"a"})}, {"m-00002-of-00002.gguf", part(2, 2, 2, {"b"}, 0)}},
          ErrorCode::malformed, "should have split.no 1");
  refused("twice", {{"m-00001-of-00002.gguf", part(1, 2, 2, {"a"})}, {"m-00002-of-00002.gguf", part(2, 2, 2, {"a"})}},
          ErrorCode::malformed, "readers disagree");
  refused("name", {{"model.gguf", part(1, 2, 2, {"a"})}}, ErrorCode::malformed, "<prefix>-NNNNN-of-MMMMM.gguf");
  // The form's numbers are digits, each of them: a letter (or a character
  // just outside '0'..'9') is no part number.
  refused("name-letter", {{"m-0000a-of-00002.gguf", part(1, 2, 2, {"a"})}}, ErrorCode::malformed,
          "<prefix>-NNNNN-of-MMMMM.gguf");
  refused("name-slash", {{"m-00001-of-0000:.gguf", part(1, 2, 2, {"a"})}}, ErrorCode::malformed,
          "<prefix>-NNNNN-of-MMMMM.gguf");
  refused("name-below", {{"m-0000.-of-00002.gguf", part(1, 2, 2, {"a"})}}, ErrorCode::malformed,
          "<prefix>-NNNNN-of-MMMMM.gguf");
  refused("name-count", {{"m-00001-of-00003.gguf", part(1, 2, 2, {"a"})}}, ErrorCode::malformed,
          "the name says part 1 of 3");
}
