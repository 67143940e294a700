// Hostile inputs: each must give its typed error, never a crash, a hang or
// a half-filled model.
#include "onnx/external_data.hpp"
#include "onnx/wire_reader.hpp"
#include "unit/onnx/external_fixture.hpp"

#include <sys/stat.h>

#include <functional>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;

TEST_CASE("hostile external data locations") {
  ScratchDir outside("hostile-outside");
  auto secret = outside.write_pattern("secret.bin", 64);
  ScratchDir dir("hostile-ext");
  dir.write_pattern("blob.bin", 64);
  dir.write_pattern("sub/blob.bin", 64);
  std::filesystem::create_symlink(secret, dir / "escape.bin");
  std::filesystem::create_symlink(outside.path(), dir / "cache");
  std::filesystem::create_symlink("/dev/null", dir / "null.bin");
  REQUIRE(::mkfifo((dir / "fifo.bin").c_str(), 0600) == 0);
  std::filesystem::create_directories(dir / "adir");

  struct Case {
    const char* what;
    Entries entries;
    ErrorCode expected;
    const char* message_part;
  };
  const std::uint64_t big = UINT64_MAX - 2;
  const Case cases[] = {
      {"parent traversal", at("../hostile-outside/secret.bin", 0), ErrorCode::path_escapes, ".."},
      {"traversal inside a path", at("sub/../../x.bin", 0), ErrorCode::path_escapes, ".."},
      {"backslash traversal", at("sub\\..\\..\\x.bin", 0), ErrorCode::path_escapes, ".."},
      {"absolute path", at(secret.string(), 0), ErrorCode::path_escapes, "absolute"},
      {"drive-letter path", at("C:\\weights.bin", 0), ErrorCode::path_escapes, "absolute"},
      {"symlink escaping the model dir", at("escape.bin", 0), ErrorCode::path_escapes, "allow_model_real_dir"},
      {"symlinked directory escaping", at("cache/secret.bin", 0), ErrorCode::path_escapes, "allow_model_real_dir"},
      {"symlink to a device", at("null.bin", 0), ErrorCode::path_escapes, "allow_model_real_dir"},
      {"FIFO", at("fifo.bin", 0), ErrorCode::io, "FIFO"},
      {"directory", at("adir", 0), ErrorCode::io, "directory"},
      {"missing file", at("missing.bin", 0), ErrorCode::not_found, "missing.bin"},
      {"no location", Entries{{"offset", "0"}}, ErrorCode::malformed, "location"},
      {"empty location", at("", 0), ErrorCode::malformed, "location"},
      {"offset+length overflow", at("blob.bin", big, 16), ErrorCode::out_of_bounds, "overflows"},
      {"offset past EOF", at("blob.bin", 65), ErrorCode::out_of_bounds, "past the end"},
      {"length past EOF", at("blob.bin", 56), ErrorCode::out_of_bounds, "past the end"},
      {"length disagreeing with dims", at("blob.bin", 0, 15), ErrorCode::size_mismatch, "length"},
      {"offset beyond 64 bits", Entries{{"location", "blob.bin"}, {"offset", "99999999999999999999999"}},
       ErrorCode::overflow, "64 bits"},
      {"offset not a number", Entries{{"location", "blob.bin"}, {"offset", "12abc"}}, ErrorCode::malformed, "decimal"},
      {"negative length", Entries{{"location", "blob.bin"}, {"length", "-16"}}, ErrorCode::malformed, "decimal"},
      // Issue 12 §4: fields that were read but not validated.
      {"negative offset", Entries{{"location", "blob.bin"}, {"offset", "-16"}}, ErrorCode::malformed, "decimal"},
      {"offset with a sign", Entries{{"location", "blob.bin"}, {"offset", "+16"}}, ErrorCode::malformed, "decimal"},
      {"offset with blanks", Entries{{"location", "blob.bin"}, {"offset", " 16"}}, ErrorCode::malformed, "decimal"},
      {"empty offset", Entries{{"location", "blob.bin"}, {"offset", ""}}, ErrorCode::malformed, "decimal"},
      {"location given twice", Entries{{"location", "blob.bin"}, {"location", "sub/blob.bin"}}, ErrorCode::malformed,
       "'location' is given more than once"},
      {"offset given twice", Entries{{"location", "blob.bin"}, {"offset", "0"}, {"offset", "16"}}, ErrorCode::malformed,
       "'offset' is given more than once"},
      {"length given twice, equal", Entries{{"location", "blob.bin"}, {"length", "16"}, {"length", "16"}},
       ErrorCode::malformed, "'length' is given more than once"},
      {"checksum given twice", Entries{{"location", "blob.bin"}, {"checksum", std::string(40, 'a')}, {"checksum", std::string(40, 'a')}},
       ErrorCode::malformed, "'checksum' is given more than once"},
      {"checksum not hex", Entries{{"location", "blob.bin"}, {"checksum", std::string(39, 'a') + "g"}}, ErrorCode::malformed,
       "not a SHA-1 digest"},
      {"checksum too short", Entries{{"location", "blob.bin"}, {"checksum", std::string(39, 'a')}}, ErrorCode::malformed,
       "not a SHA-1 digest"},
      {"checksum of SHA-256 length", Entries{{"location", "blob.bin"}, {"checksum", std::string(64, 'a')}},
       ErrorCode::malformed, "not a SHA-1 digest"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto r = load_written(dir, {external_tensor("victim", 4, c.entries)});
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == c.expected);
    CHECK(r.error().tensor == "victim");
    CHECK_FALSE(r.error().file.empty());
    CHECK(r.error().offset.has_value());
    CHECK_MESSAGE(r.error().to_string().find(c.message_part) != std::string::npos, r.error().to_string());
  }

  SUBCASE("out-of-bounds errors name the data file, the tensor and the offset") {
    auto r = load_written(dir, {external_tensor("victim", 4, at("sub/blob.bin", 60))});
    REQUIRE(r.code() == ErrorCode::out_of_bounds);
    CHECK(r.error().file == (dir / "sub/blob.bin").string());
    CHECK(r.error().offset == 60u);
  }
  SUBCASE("LoadOptions::allow_model_real_dir admits nothing outside the model file's real directory") {
    LoadOptions allow;
    allow.allow_model_real_dir = true;  // model.onnx is a plain file here: its real directory is `dir`
    for (const char* location : {"escape.bin", "cache/secret.bin", "null.bin", "../hostile-outside/secret.bin"})
      CHECK_MESSAGE(load_written(dir, {external_tensor("v", 4, at(location, 0))}, allow).code() == ErrorCode::path_escapes,
                    location);
    CHECK(load_written(dir, {external_tensor("v", 4, at(secret.string(), 0))}, allow).code() == ErrorCode::path_escapes);
  }
}

namespace {

Proto f32_initializer(std::string_view name) {
  Proto t = tensor(name, 1, {2});
  raw_data(t, {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40});
  return t;
}

// A model that exercises every message kind the decoder walks.
Proto rich_model() {
  Proto then_g = graph({node("Identity", {"then_w"}, {"o"})}, {f32_initializer("then_w")});
  Proto vfs;
  vfs.str(1, "value_floats").f32(7, 1.0f).f32(7, 2.0f);
  Proto ints = tensor("ints", 7, {3});
  ints.packed_varints(7, {1, -1, 300});
  Proto g = graph({node("Constant", {}, {"c"}, {vfs}), node("If", {"cond"}, {"y"}, {attribute_graph("then_branch", then_g)}),
                   node("Gemm", {"a", "w"}, {"z"}, {attribute_int("transB", 1)})},
                  {f32_initializer("w"), ints});
  return model(g);
}

}  // namespace

TEST_CASE("a string tensor marked EXTERNAL is refused, not listed with its reference unchecked") {
  ScratchDir dir("hostile-string-external");
  dir.write_pattern("blob.bin", 64);
  for (const Entries& entries : {at("blob.bin", 0), at("../outside.bin", 0), Entries{}}) {
    auto r = load_written(dir, {external_tensor("labels", 4, entries, /*dtype=*/8)});
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == ErrorCode::malformed);
    CHECK(r.error().tensor == "labels");
    CHECK_MESSAGE(r.error().to_string().find("string tensor cannot be stored as external data") != std::string::npos,
                  r.error().to_string());
  }
  // An inline string tensor is still listed, not refused.
  Proto inline_strings = tensor("words", 8, {2});
  inline_strings.str(6, "a").str(6, "b");
  auto ok = load_written(dir, {inline_strings});
  REQUIRE_MESSAGE(ok.ok(), ok.error().to_string());
  CHECK(ok->string_tensors().size() == 1);
}

TEST_CASE("truncated protobuf at every cut point never crashes; cuts inside the graph are malformed") {
  const Proto full = rich_model();
  REQUIRE(load_proto(full).ok());
  // The graph is the last top-level field: find where its payload starts.
  ballast::onnx::WireField graph_field;
  {
    ballast::onnx::WireReader r(full.span(), 0);
    while (!r.at_end()) {
      auto f = r.next();
      REQUIRE(f.ok());
      if (f->number == 7) graph_field = *f;
    }
  }
  for (std::size_t cut = 0; cut < full.data.size(); ++cut) {
    CAPTURE(cut);
    std::vector<std::uint8_t> prefix(full.data.begin(), full.data.begin() + static_cast<std::ptrdiff_t>(cut));
    auto r = load_onnx_from_bytes(std::as_bytes(std::span<const std::uint8_t>(prefix)), ".");
    if (cut > graph_field.payload_offset) {
      REQUIRE_FALSE(r.ok());
      CHECK(r.code() == ErrorCode::malformed);
      REQUIRE(r.error().offset.has_value());
      CHECK(*r.error().offset <= cut);
    } else if (!r.ok()) {
      CHECK(r.code() == ErrorCode::malformed);
    }
  }
}

TEST_CASE("absurd dims are refused by name before anything is allocated") {
  struct Case {
    const char* what;
    std::vector<std::int64_t> dims;
    ErrorCode expected;
  };
  const Case cases[] = {
      {"negative", {4, -1}, ErrorCode::malformed},
      {"product overflows", {std::int64_t{1} << 62, std::int64_t{1} << 62}, ErrorCode::overflow},
      {"above max_tensor_elements", {std::int64_t{1} << 41}, ErrorCode::overflow},
      {"huge but empty is still checked per dim", {0, -5}, ErrorCode::malformed},
      // No elements to bound it: a dim past the cap beside a 0 is absurd too.
      {"a dim above max_tensor_elements beside a 0", {std::int64_t{1} << 62, 0}, ErrorCode::overflow},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Proto t;
    for (auto d : c.dims) t.sint(1, d);
    t.varint(2, 1).str(8, "absurd");
    raw_data(t, {0, 0, 0, 0});
    Proto m = model_with({t});
    auto r = load_proto(m);
    CHECK(r.code() == c.expected);
    CHECK(r.error().tensor == "absurd");
  }
  // At the cap beside a 0: accepted (an empty tensor), one more refused.
  LoadOptions cap10;
  cap10.max_tensor_elements = 10;
  for (std::int64_t d : {10, 11}) {
    CAPTURE(d);
    Proto t = tensor("empty", 1, {0, d});
    auto r = load_proto(model_with({t}), ".", cap10);
    CHECK(r.ok() == (d == 10));
    if (d == 11)
      CHECK(r.error().message.find("dim 11 exceeds LoadOptions::max_tensor_elements (10)") != std::string::npos);
  }
  LoadOptions tight;
  tight.max_tensor_elements = 10;
  Proto t = tensor("big", 1, {11});
  Proto m = model_with({t});
  auto r = load_proto(m, ".", tight);
  CHECK(r.code() == ErrorCode::overflow);
  CHECK(r.error().message.find("max_tensor_elements") != std::string::npos);
  // External tensors are checked before their file is touched.
  ScratchDir dir("hostile-dims");
  auto ext = load_written(dir, {external_tensor("big_ext", std::int64_t{1} << 50, at("not-there.bin", 0))});
  CHECK(ext.code() == ErrorCode::overflow);
}

TEST_CASE("wrong wire types and malformed fields are malformed errors with offsets") {
  struct Case {
    const char* what;
    std::function<Proto()> build;
  };
  const Case cases[] = {
      {"tensor name as varint", [] { Proto t; t.varint(8, 5).varint(2, 1); return model_with({t}); }},
      {"dims as fixed32", [] { Proto t; t.fixed32(1, 5).varint(2, 1).str(8, "x"); return model_with({t}); }},
      {"data_type as bytes", [] { Proto t; t.str(2, "x").str(8, "x"); return model_with({t}); }},
      {"raw_data as fixed64", [] { Proto t = tensor("x", 1, {}); t.fixed64(9, 0); return model_with({t}); }},
      {"float_data as varint", [] { Proto t = tensor("x", 1, {1}); t.varint(4, 1); return model_with({t}); }},
      {"int32_data as fixed32", [] { Proto t = tensor("x", 6, {1}); t.fixed32(5, 1); return model_with({t}); }},
      {"packed float_data of 5 bytes", [] { Proto t = tensor("x", 1, {1}); t.bytes(4, std::vector<std::uint8_t>(5)); return model_with({t}); }},
      {"broken packed int64_data", [] { Proto t = tensor("x", 7, {1}); t.bytes(7, std::vector<std::uint8_t>{0x80}); return model_with({t}); }},
      {"graph as varint", [] { Proto m; m.varint(1, 8).varint(7, 1); return m; }},
      {"initializer as fixed32", [] { Proto g; g.fixed32(5, 1); return model(g); }},
      {"node as varint", [] { Proto g; g.varint(1, 1); return model(g); }},
      {"op_type as varint", [] { Proto n; n.varint(4, 1); Proto g; g.msg(1, n); return model(g); }},
      {"attribute i as bytes", [] { Proto a; a.str(1, "k").str(3, "x"); Proto n; n.str(4, "Op").msg(5, a); Proto g; g.msg(1, n); return model(g); }},
      {"attribute graph as varint", [] { Proto a; a.str(1, "body").varint(6, 1); Proto n; n.str(4, "If").msg(5, a); Proto g; g.msg(1, n); return model(g); }},
      {"opset version as bytes", [] { Proto o; o.str(2, "x"); Proto m; m.msg(8, o); return m; }},
      {"external entry key as varint", [] { Proto e; e.varint(1, 1); Proto t = tensor("x", 1, {1}); t.msg(13, e).varint(14, 1); return model_with({t}); }},
      {"overlong varint in data_type", [] {
         Proto t;
         t.str(8, "x").tag(2, 0).raw({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01});
         return model_with({t});
       }},
      {"group inside a tensor", [] { Proto t = tensor("x", 1, {}); t.tag(3, 3); return model_with({t}); }},
      {"length past the end of the graph", [] { Proto m; m.tag(7, 2).raw({0x7f, 0x0a}); return m; }},
      {"length past the end inside a node", [] { Proto n; n.tag(4, 2).raw({0x10, 'a'}); Proto g; g.msg(1, n); return model(g); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Proto m = c.build();
    auto r = load_proto(m);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == ErrorCode::malformed);
    REQUIRE(r.error().offset.has_value());
    CHECK(*r.error().offset < m.data.size());
  }
}

TEST_CASE("deep subgraph nesting is capped, not a stack overflow") {
  auto nested = [](int levels) {
    Proto g = graph({}, {f32_initializer("leaf")});
    for (int i = 0; i < levels; ++i) {
      Proto outer;
      outer.msg(1, node("If", {"c"}, {"o" + std::to_string(i)}, {attribute_graph("then_branch", g)}));
      g = outer;
    }
    return model(g);
  };
  Proto ok_model = nested(64);
  auto ok = load_proto(ok_model);
  REQUIRE_MESSAGE(ok.ok(), ok.error().to_string());
  CHECK(weight_named(*ok, "leaf").source == WeightSource::subgraph);

  Proto too_deep = nested(65);
  auto deep = load_proto(too_deep);
  CHECK(deep.code() == ErrorCode::malformed);
  CHECK(deep.error().message.find("nested") != std::string::npos);

  Proto absurd = nested(1000);  // far past the cap: refused at the cap, not by the stack
  CHECK(load_proto(absurd).code() == ErrorCode::malformed);
}

TEST_CASE("a failure after some weights were decoded hands back no model") {
  ScratchDir dir("hostile-partial");
  dir.write_pattern("blob.bin", 64);
  auto r = load_written(dir, {f32_initializer("good"), external_tensor("good_ext", 4, at("blob.bin", 0)),
                              external_tensor("bad", 4, at("../x.bin", 0))});
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == ErrorCode::path_escapes);
  CHECK(r.error().tensor == "bad");
}

TEST_CASE("tensor fields the loader used to accept without checking are refused by tensor and field") {
  // Issue 12 §4. Each case names the tensor; the message names the field.
  struct Case {
    const char* what;
    std::function<Proto()> build;
    ErrorCode expected;
    const char* message_part;
  };
  const Case cases[] = {
      {"string_data on a float tensor",
       [] {
         Proto t = tensor("x", 1, {1});
         raw_data(t, {0, 0, 0, 0});
         t.str(6, "a");
         return t;
       },
       ErrorCode::malformed, "string_data holds 1 values but data_type is float"},
      {"string_data alone on a float tensor",
       [] {
         Proto t = tensor("x", 1, {1});
         t.str(6, "abcd");
         return t;
       },
       ErrorCode::malformed, "string_data"},
      {"string tensor with raw_data",
       [] {
         Proto t = tensor("x", 8, {1});
         t.str(6, "a");
         raw_data(t, {1});
         return t;
       },
       ErrorCode::malformed, "string_data only, but raw_data"},
      {"string tensor with int32_data",
       [] {
         Proto t = tensor("x", 8, {1});
         t.str(6, "a");
         t.packed_varints(5, {1});
         return t;
       },
       ErrorCode::malformed, "string_data only"},
      {"string tensor with fewer strings than dims",
       [] {
         Proto t = tensor("x", 8, {3});
         t.str(6, "a").str(6, "b");
         return t;
       },
       ErrorCode::size_mismatch, "string_data has 2 values but dims need 3"},
      {"string tensor with more strings than dims",
       [] {
         Proto t = tensor("x", 8, {});
         t.str(6, "a").str(6, "b");
         return t;
       },
       ErrorCode::size_mismatch, "string_data has 2 values but dims need 1"},
      {"int8 value 300 in int32_data",
       [] {
         Proto t = tensor("x", 3, {2});
         t.packed_varints(5, {1, 300});
         return t;
       },
       ErrorCode::malformed, "int32_data value 300 does not fit in the 8 bits"},
      {"int8 value -129 in int32_data (unpacked)",
       [] {
         Proto t = tensor("x", 3, {1});
         t.sint(5, -129);
         return t;
       },
       ErrorCode::malformed, "value -129 does not fit"},
      {"uint8 value 256 in int32_data",
       [] {
         Proto t = tensor("x", 2, {1});
         t.packed_varints(5, {256});
         return t;
       },
       ErrorCode::malformed, "int32_data value 256 does not fit in the 8 bits"},
      {"float16 bits 70000 in int32_data",
       [] {
         Proto t = tensor("x", 10, {1});
         t.packed_varints(5, {70000});
         return t;
       },
       ErrorCode::malformed, "does not fit in the 16 bits"},
      {"float16 bits -1 in int32_data (a writer's sign, not a float)",
       [] {
         Proto t = tensor("x", 10, {1});
         t.sint(5, -1);
         return t;
       },
       ErrorCode::malformed, "int32_data value -1 does not fit in the 16 bits"},
      {"bfloat16 bits -16512 in int32_data",
       [] {
         Proto t = tensor("x", 16, {1});
         t.packed_varints(5, {-16512});
         return t;
       },
       ErrorCode::malformed, "int32_data value -16512 does not fit in the 16 bits"},
      {"float8e4m3fn bits -2 in int32_data",
       [] {
         Proto t = tensor("x", 17, {1});
         t.packed_varints(5, {-2});
         return t;
       },
       ErrorCode::malformed, "int32_data value -2 does not fit in the 8 bits"},
      {"uint32 value 2^32 in uint64_data",
       [] {
         Proto t = tensor("x", 12, {1});
         t.packed_varints(11, {std::int64_t{1} << 32});
         return t;
       },
       ErrorCode::malformed, "uint64_data value 4294967296 does not fit in the 32 bits"},
      {"int32 value 2^40 in int32_data",
       [] {
         Proto t = tensor("x", 6, {1});
         t.packed_varints(5, {std::int64_t{1} << 40});
         return t;
       },
       ErrorCode::malformed, "does not fit in the 32 bits"},
      {"raw_data and float_data",
       [] {
         Proto t = tensor("x", 1, {1});
         raw_data(t, {0, 0, 0, 0});
         t.packed_floats(4, {1.0f});
         return t;
       },
       ErrorCode::malformed, "both raw_data and float_data"},
      {"float_data and int32_data",
       [] {
         Proto t = tensor("x", 1, {1});
         t.packed_floats(4, {1.0f});
         t.packed_varints(5, {1});
         return t;
       },
       ErrorCode::malformed, "both float_data and int32_data"},
      {"data_location 2",
       [] {
         Proto t = tensor("x", 1, {1});
         raw_data(t, {0, 0, 0, 0});
         t.varint(14, 2);
         return t;
       },
       ErrorCode::unsupported, "unknown data_location 2"},
      {"EXTERNAL with raw_data too",
       [] {
         Proto t = tensor("x", 1, {1});
         raw_data(t, {0, 0, 0, 0});
         t.varint(14, 1);
         return t;
       },
       ErrorCode::malformed, "also carries inline data"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Proto m = model_with({c.build()});
    auto r = load_proto(m);
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == c.expected);
    CHECK(r.error().tensor == "x");
    CHECK(r.error().offset.has_value());
    CHECK_MESSAGE(r.error().to_string().find(c.message_part) != std::string::npos, r.error().to_string());
  }
  // What stays accepted: bit patterns in the signed fields, and the values
  // at the edges of each width.
  Proto edges_i8 = tensor("i8", 3, {3});
  edges_i8.packed_varints(5, {-128, 127, 255});
  Proto edges_u16 = tensor("u16", 4, {2});
  edges_u16.packed_varints(5, {0, 65535});
  Proto edges_u32 = tensor("u32", 12, {1});
  edges_u32.packed_varints(11, {0xffffffffLL});
  Proto b = tensor("flag", 9, {2});
  b.packed_varints(5, {0, 7});  // bool: nonzero is true, as in the reference
  Proto strings = tensor("words", 8, {2});
  strings.str(6, "a").str(6, "b");
  Proto m = model_with({edges_i8, edges_u16, edges_u32, b, strings});
  auto ok = load_proto(m);
  REQUIRE_MESSAGE(ok.ok(), ok.error().to_string());
  CHECK(bytes_named(*ok, "i8") == std::vector<std::uint8_t>{0x80, 0x7f, 0xff});
  CHECK(bytes_named(*ok, "u16") == std::vector<std::uint8_t>{0, 0, 0xff, 0xff});
  CHECK(bytes_named(*ok, "flag") == std::vector<std::uint8_t>{0, 1});
}

TEST_CASE("empty and duplicate initializer names are refused, naming the weight") {
  Proto a = f32_initializer("w");
  Proto nameless = tensor("", 1, {2});
  raw_data(nameless, {0, 0, 0, 0, 0, 0, 0, 0});
  Proto dup = model_with({a, f32_initializer("w")});
  auto r = load_proto(dup);
  CHECK(r.code() == ErrorCode::malformed);
  CHECK(r.error().tensor == "w");
  CHECK(r.error().message.find("duplicate weight name") != std::string::npos);
  Proto empty = model_with({nameless});
  auto e = load_proto(empty);
  CHECK(e.code() == ErrorCode::malformed);
  CHECK(e.error().message.find("without a name") != std::string::npos);
  // A NUL inside a name: C callers would read "a\0x" and "a\0y" both as "a".
  auto nul = load_proto(model_with({f32_initializer(std::string("a\0x", 3)), f32_initializer(std::string("a\0y", 3))}));
  CHECK(nul.code() == ErrorCode::malformed);
  CHECK(nul.error().message.find("NUL byte; C callers would read it as 'a'") != std::string::npos);
  CHECK(nul.error().tensor == "a\\x00x");
}

// A drive letter is an ASCII letter, either case, the ends of both ranges
// included, before a colon; the bytes just outside those ranges make an
// ordinary relative name.
TEST_CASE("drive-letter locations: every letter range's ends refused, the bytes beside them not") {
  for (const char* drive : {"A:w.bin", "Z:w.bin", "a:w.bin", "z:w.bin", "m:\\w.bin"}) {
    CAPTURE(drive);
    const Status s = onnx::check_location_text(drive);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == ErrorCode::path_escapes);
    CHECK_MESSAGE(s.to_string().find("is absolute") != std::string::npos, s.to_string());
  }
  for (const char* name : {"@:w.bin", "[:w.bin", "`:w.bin", "{:w.bin", "0:w.bin", "ab:w.bin"}) {
    CAPTURE(name);
    CHECK(onnx::check_location_text(name).ok());
  }
}
