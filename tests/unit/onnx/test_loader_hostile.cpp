// Hostile inputs: each must give its typed error, never a crash, a hang or
// a half-filled model.
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
