#include "unit/onnx/load_helpers.hpp"
#include "unit/store/scratch_dir.hpp"

#include <cstring>
#include <set>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;
using Bytes8 = std::vector<std::uint8_t>;

namespace {
Bytes8 le_floats(std::initializer_list<float> values) {
  Bytes8 out(values.size() * 4);
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}
Bytes8 le_int64s(std::initializer_list<std::int64_t> values) {
  Bytes8 out;
  for (auto v : values)
    for (int k = 0; k < 8; ++k) out.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * k)));
  return out;
}
Proto f32_tensor(std::string_view name, std::initializer_list<float> values) {
  Proto t = tensor(name, 1, {static_cast<std::int64_t>(values.size())});
  raw_data(t, le_floats(values));
  return t;
}
}  // namespace

TEST_CASE("Constant nodes: value, value_float(s), value_int(s) become constant weights keyed by the output") {
  Proto value_attr = attribute_tensor("value", f32_tensor("ignored_inner_name", {1.5f, 2.5f}));
  Proto vf;
  vf.str(1, "value_float").f32(2, -0.25f).varint(20, 1);
  Proto vfs;  // unpacked, as python's onnx writes repeated floats
  vfs.str(1, "value_floats").f32(7, 1.0f).f32(7, 2.0f).f32(7, 3.0f).varint(20, 6);
  Proto vfs_packed;
  vfs_packed.str(1, "value_floats").packed_floats(7, {4.0f, 5.0f}).varint(20, 6);
  Proto vi;
  vi.str(1, "value_int").sint(3, -7).varint(20, 2);
  Proto vis;
  vis.str(1, "value_ints").packed_varints(8, {1, -2, 3}).varint(20, 7);

  Proto g = graph({node("Constant", {}, {"c_value"}, {value_attr}), node("Constant", {}, {"c_float"}, {vf}),
                   node("Constant", {}, {"c_floats"}, {vfs}), node("Constant", {}, {"c_floats_packed"}, {vfs_packed}),
                   node("Constant", {}, {"c_int"}, {vi}), node("Constant", {}, {"c_ints"}, {vis})},
                  {});
  Proto m = model(g);
  auto model_r = load_proto(m);
  REQUIRE_MESSAGE(model_r.ok(), model_r.error().to_string());
  const Model& model = *model_r;

  CHECK(model.weight_order().size() == 6);
  CHECK_FALSE(model.value_id("ignored_inner_name").has_value());
  const WeightRef& v = weight_named(model, "c_value");
  CHECK(v.source == WeightSource::constant);
  CHECK(v.storage == WeightRef::Storage::inline_borrowed);
  CHECK(bytes_named(model, "c_value") == le_floats({1.5f, 2.5f}));

  const WeightRef& f = weight_named(model, "c_float");
  CHECK(f.dtype == DataType::float32);
  CHECK(f.dims.empty());
  CHECK(bytes_named(model, "c_float") == le_floats({-0.25f}));

  const WeightRef& fs = weight_named(model, "c_floats");
  CHECK(fs.dims == std::vector<std::int64_t>{3});
  CHECK(fs.storage == WeightRef::Storage::inline_owned);
  CHECK(bytes_named(model, "c_floats") == le_floats({1.0f, 2.0f, 3.0f}));
  CHECK(weight_named(model, "c_floats_packed").storage == WeightRef::Storage::inline_borrowed);
  CHECK(bytes_named(model, "c_floats_packed") == le_floats({4.0f, 5.0f}));

  const WeightRef& i = weight_named(model, "c_int");
  CHECK(i.dtype == DataType::int64);
  CHECK(i.dims.empty());
  CHECK(bytes_named(model, "c_int") == le_int64s({-7}));
  CHECK(weight_named(model, "c_ints").dims == std::vector<std::int64_t>{3});
  CHECK(bytes_named(model, "c_ints") == le_int64s({1, -2, 3}));
  for (ValueId id : model.weight_order()) CHECK(model.store().weights().at(id).source == WeightSource::constant);
}

TEST_CASE("Constant strings are listed, sparse values reported by name, never dropped silently") {
  Proto vs;
  vs.str(1, "value_string").str(4, "hello").varint(20, 3);
  Proto vss;
  vss.str(1, "value_strings").str(9, "a").str(9, "b").varint(20, 8);
  Proto sparse;
  sparse.str(1, "sparse_value").msg(22, Proto{}).varint(20, 11);
  Proto g = graph({node("Constant", {}, {"s1"}, {vs}), node("Constant", {}, {"s2"}, {vss}),
                   node("Constant", {}, {"sp"}, {sparse})},
                  {});
  Proto m = model(g);
  auto model_r = load_proto(m);
  REQUIRE_MESSAGE(model_r.ok(), model_r.error().to_string());
  REQUIRE(model_r->string_tensors().size() == 2);
  CHECK(model_r->string_tensors()[0].name == "s1");
  CHECK(model_r->string_tensors()[0].dims.empty());
  CHECK(model_r->string_tensors()[1].dims == std::vector<std::int64_t>{2});
  CHECK(model_r->string_tensors()[1].source == WeightSource::constant);
  REQUIRE(model_r->notes().size() == 1);
  CHECK(model_r->notes()[0].tensor == "sp");
  CHECK(model_r->notes()[0].message.find("sparse") != std::string::npos);
  CHECK(model_r->store().weights().empty());
}

TEST_CASE("Constant nodes must carry exactly one value") {
  Proto none = graph({node("Constant", {}, {"c"}, {attribute_int("unrelated", 1)})}, {});
  Proto two = graph({node("Constant", {}, {"c"}, {attribute_int("value_int", 1), attribute_int("value_int", 2)})}, {});
  for (const Proto* g : {&none, &two}) {
    Proto m = model(*g);
    auto r = load_proto(m);
    CHECK(r.code() == ErrorCode::malformed);
    CHECK(r.error().tensor == "c");
  }
  // A Constant of another domain is somebody else's op: not a weight.
  Proto custom = graph({node("Constant", {}, {"c"}, {attribute_int("x", 1)}, "com.example")}, {});
  Proto mc = model(custom);
  auto ok = load_proto(mc);
  REQUIRE(ok.ok());
  CHECK(ok->store().weights().empty());
}

TEST_CASE("initializers of If/Loop/Scan bodies and nested subgraphs are weights of kind subgraph") {
  Proto then_g = graph({node("Identity", {"then_w"}, {"o1"})}, {f32_tensor("then_w", {1.0f})});
  Proto inner = graph({node("Constant", {}, {"deep_c"}, {attribute_int("value_int", 3)})}, {f32_tensor("deep_w", {4.0f})});
  Proto else_g = graph({node("Loop", {"", "cond"}, {"o2"}, {attribute_graph("body", inner)})}, {f32_tensor("else_w", {2.0f})});
  Proto scan_body = graph({}, {f32_tensor("scan_w", {5.0f})});
  Proto if_node = node("If", {"cond"}, {"y"}, {attribute_graph("then_branch", then_g), attribute_graph("else_branch", else_g)});
  Proto scan_node = node("Scan", {"x"}, {"z"}, {attribute_graph("body", scan_body), attribute_int("num_scan_inputs", 1)});
  Proto g = graph({if_node, scan_node}, {f32_tensor("main_w", {0.0f})});
  Proto m = model(g);
  auto model_r = load_proto(m);
  REQUIRE_MESSAGE(model_r.ok(), model_r.error().to_string());
  const Model& model = *model_r;
  CHECK(weight_named(model, "main_w").source == WeightSource::initializer);
  CHECK(weight_named(model, "then_w").source == WeightSource::subgraph);
  CHECK(weight_named(model, "else_w").source == WeightSource::subgraph);
  CHECK(weight_named(model, "deep_w").source == WeightSource::subgraph);
  CHECK(weight_named(model, "scan_w").source == WeightSource::subgraph);
  CHECK(weight_named(model, "deep_c").source == WeightSource::constant);
  CHECK(bytes_named(model, "deep_w") == le_floats({4.0f}));
  CHECK(model.weight_order().size() == 6);

  // Every node at every depth, with its integer attributes.
  unsigned max_depth = 0;
  bool saw_scan = false;
  for (const NodeInfo& n : model.nodes()) {
    max_depth = std::max(max_depth, n.depth);
    if (n.op_type == "Scan") {
      saw_scan = true;
      CHECK(n.depth == 0);
      CHECK(n.int_attribute("num_scan_inputs") == 1);
    }
    if (n.op_type == "Loop") {
      CHECK(n.depth == 1);
      REQUIRE(n.inputs.size() == 2);
      CHECK(n.inputs[0].empty());  // omitted optional input kept as ""
    }
  }
  CHECK(saw_scan);
  CHECK(max_depth == 2);
  // Parents come before the nodes of their subgraphs.
  REQUIRE(model.nodes().size() >= 3);
  CHECK(model.nodes()[0].op_type == "If");
  CHECK(model.nodes()[0].depth == 0);
  CHECK(model.nodes()[1].depth == 1);
  CHECK(model.nodes().size() == 5);
}

TEST_CASE("errors inside subgraphs say which node and attribute they came from") {
  Proto bad = tensor("bad_w", 1, {2});
  raw_data(bad, {1, 2, 3});
  Proto body = graph({}, {bad});
  Proto m = model(graph({node("Loop", {"", "c"}, {"o"}, {attribute_graph("body", body)})}, {}));
  auto r = load_proto(m);
  REQUIRE(r.code() == ErrorCode::size_mismatch);
  CHECK(r.error().tensor == "bad_w");
  CHECK(r.error().context.find("body") != std::string::npos);
  CHECK(r.error().context.find("Loop") != std::string::npos);
}

TEST_CASE("nodes keep integer attributes (MatMulNBits, Gemm) and values are interned") {
  Proto mmnb = node("MatMulNBits", {"x", "B", "scales", "", "zero_points"}, {"y"},
                    {attribute_int("K", 4096), attribute_int("N", 11008), attribute_int("bits", 4),
                     attribute_int("block_size", 32)},
                    "com.microsoft");
  Proto alpha;
  alpha.str(1, "alpha").f32(2, 1.0f).varint(20, 1);
  Proto gemm = node("Gemm", {"y", "W", "bias"}, {"z"}, {attribute_int("transB", 1), alpha});
  Proto m = model(graph({mmnb, gemm}, {f32_tensor("W", {1.0f})}));
  auto model_r = load_proto(m);
  REQUIRE_MESSAGE(model_r.ok(), model_r.error().to_string());
  const Model& model = *model_r;
  REQUIRE(model.nodes().size() == 2);
  const NodeInfo& a = model.nodes()[0];
  CHECK(a.op_type == "MatMulNBits");
  CHECK(a.domain == "com.microsoft");
  CHECK(a.name == "MatMulNBits_node");
  CHECK(a.int_attribute("K") == 4096);
  CHECK(a.int_attribute("N") == 11008);
  CHECK(a.int_attribute("bits") == 4);
  CHECK(a.int_attribute("block_size") == 32);
  CHECK(a.int_attributes.size() == 4);
  const NodeInfo& b = model.nodes()[1];
  CHECK(b.int_attribute("transB") == 1);
  CHECK_FALSE(b.int_attribute("alpha").has_value());  // only integers are kept
  for (std::string_view v : {"x", "B", "scales", "zero_points", "y", "W", "bias", "z"}) {
    auto id = model.value_id(v);
    REQUIRE_MESSAGE(id.has_value(), v);
    CHECK(model.value_name(*id) == v);
  }
  CHECK_FALSE(model.value_id("").has_value());
  CHECK(model.value_name(ValueId{1u << 30}).empty());
  CHECK(model.ir_version() == 8);
  REQUIRE(model.opsets().size() == 1);
  CHECK(model.opsets()[0] == std::pair<std::string, std::int64_t>{"", 17});
}

TEST_CASE("nodes keep integer lists (a Transpose's perm), packed or not; a broken packed run is no list") {
  Proto packed = node("Transpose", {"W"}, {"a"}, {attribute_ints("perm", {1, 0})});
  Proto unpacked = named_node("t2", "Transpose", {"a"}, {"b"}, {attribute_ints("perm", {0, 2, 1}, false)});
  // perm's packed run ends inside a varint: read as no list, not as [1].
  Proto broken_attr;
  broken_attr.str(1, "perm").bytes(8, std::vector<std::uint8_t>{0x01, 0x80}).varint(20, 7);
  Proto broken = named_node("t3", "Transpose", {"b"}, {"c"}, {broken_attr, attribute_int("axis", 3)});
  Proto none = named_node("t4", "Transpose", {"c"}, {"d"});
  Proto m = model(graph({packed, unpacked, broken, none}, {f32_tensor("W", {1.0f, 2.0f})}));
  auto model_r = load_proto(m);
  REQUIRE_MESSAGE(model_r.ok(), model_r.error().to_string());
  const auto& nodes = model_r->nodes();
  REQUIRE(nodes.size() == 4);
  auto list = [](const NodeInfo& n) {
    auto perm = n.ints_attribute("perm");
    return perm ? std::vector<std::int64_t>(perm->begin(), perm->end()) : std::vector<std::int64_t>{-7};
  };
  CHECK(list(nodes[0]) == std::vector<std::int64_t>{1, 0});
  CHECK(list(nodes[1]) == std::vector<std::int64_t>{0, 2, 1});
  CHECK(list(nodes[2]).empty());  // present, unreadable: no values
  CHECK(nodes[2].int_attribute("axis") == 3);
  CHECK(list(nodes[3]) == std::vector<std::int64_t>{-7});  // absent
  CHECK(nodes[0].int_attributes.empty());                  // a list is not an integer
}

TEST_CASE("model-local functions are counted, not read: their nodes are not in nodes()") {
  Proto body;
  body.str(1, "Block");
  body.str(4, "x").str(4, "w").str(5, "y");
  body.msg(7, node("MatMul", {"x", "w"}, {"t"}));
  body.msg(7, node("Relu", {"t"}, {"y"}));
  body.str(10, "local");
  Proto empty;
  empty.str(1, "Nothing");
  Proto m = model(graph({named_node("call0", "Block", {"X", "W"}, {"Y0"}, {}, "local"),
                         named_node("call1", "Block", {"Y0", "W"}, {"Y1"}, {}, "local")},
                        {f32_tensor("W", {1.0f})}));
  m.msg(25, body).msg(25, empty);
  auto model_r = load_proto(m);
  REQUIRE_MESSAGE(model_r.ok(), model_r.error().to_string());
  CHECK(model_r->nodes().size() == 2);
  REQUIRE(model_r->functions().size() == 2);
  CHECK(model_r->functions()[0].domain == "local");
  CHECK(model_r->functions()[0].name == "Block");
  CHECK(model_r->functions()[0].nodes == 2);
  CHECK(model_r->functions()[1].domain.empty());
  CHECK(model_r->functions()[1].name == "Nothing");
  CHECK(model_r->functions()[1].nodes == 0);
  // One note for both, naming them and counting their nodes: inspect, the C
  // API and Python see what the planner's skips say.
  REQUIRE(model_r->notes().size() == 1);
  CHECK(model_r->notes()[0].tensor == "local:Block");
  CHECK(model_r->notes()[0].message.find("2 model-local functions ('local:Block', 'Nothing', 2 nodes in all)") == 0);
  CHECK(model_r->notes()[0].message.find("count as dead") != std::string::npos);

  Proto none = model(graph({}, {f32_tensor("W", {1.0f})}));
  auto plain = load_proto(none);
  REQUIRE(plain.ok());
  CHECK(plain->notes().empty());
}

TEST_CASE("a duplicate weight name is malformed and names the weight") {
  Proto m1 = model(graph({}, {f32_tensor("w", {1.0f}), f32_tensor("w", {2.0f})}));
  auto r1 = load_proto(m1);
  CHECK(r1.code() == ErrorCode::malformed);
  CHECK(r1.error().tensor == "w");
  CHECK(r1.error().message.find("duplicate") != std::string::npos);
  Proto m2 = model(graph({node("Constant", {}, {"w"}, {attribute_int("value_int", 1)})}, {f32_tensor("w", {1.0f})}));
  CHECK(load_proto(m2).code() == ErrorCode::malformed);
  Proto unnamed = tensor("", 1, {1});
  raw_data(unnamed, le_floats({1.0f}));
  Proto m3 = model(graph({}, {unnamed}));
  CHECK(load_proto(m3).code() == ErrorCode::malformed);
}

TEST_CASE("sparse_initializer is reported by name in notes") {
  Proto values = tensor("sparse_w", 1, {1});
  values.packed_floats(4, {1.0f});
  Proto sparse;
  sparse.msg(1, values).msg(2, tensor("sparse_w_idx", 7, {1})).packed_varints(3, {10});
  Proto g = graph({}, {f32_tensor("dense", {1.0f})});
  g.msg(15, sparse);
  Proto m = model(g);
  auto model_r = load_proto(m);
  REQUIRE_MESSAGE(model_r.ok(), model_r.error().to_string());
  REQUIRE(model_r->notes().size() == 1);
  CHECK(model_r->notes()[0].tensor == "sparse_w");
  CHECK(model_r->notes()[0].message.find("sparse_initializer") != std::string::npos);
  CHECK(model_r->store().weights().size() == 1);
}

TEST_CASE("an initializer that is also a graph input: noted as an overridable default from IR version 4, not before") {
  // ONNX: from IR version 4 an initializer named like a graph input is that
  // input's default, which the caller may feed (ONNX Runtime then does not
  // treat it as a constant); up to IR version 3 every initializer had to be
  // listed as an input, and it is a constant. torch.onnx.export writes the
  // first with keep_initializers_as_inputs=True.
  auto value_info = [](std::string_view name) {
    Proto v;
    v.str(1, name);
    return v;
  };
  for (std::uint64_t ir : {3u, 4u, 8u}) {
    CAPTURE(ir);
    Proto g = graph({node("MatMul", {"X", "W"}, {"Y"})}, {f32_tensor("W", {1.0f, 2.0f}), f32_tensor("C", {3.0f})});
    g.msg(11, value_info("X")).msg(11, value_info("W"));
    Proto opset;
    opset.str(1, "").varint(2, 17);
    Proto m;
    m.varint(1, ir).msg(8, opset).msg(7, g);
    auto loaded = load_proto(m);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
    CHECK(loaded->store().weights().size() == 2);  // loaded either way: its bytes are the default
    if (ir < 4) {
      CHECK(loaded->notes().empty());
    } else {
      REQUIRE(loaded->notes().size() == 1);
      CHECK(loaded->notes()[0].tensor == "W");
      CHECK_MESSAGE(loaded->notes()[0].message.find("also a graph input") != std::string::npos,
                    loaded->notes()[0].message);
    }
  }
  // Every weight an input (torch's keep_initializers_as_inputs): one note
  // for all, on the first, with the count.
  {
    Proto g = graph({}, {});
    for (int i = 0; i < 500; ++i) g.msg(5, f32_tensor("w" + std::to_string(i), {1.0f}));
    for (int i = 0; i < 500; ++i) g.msg(11, value_info("w" + std::to_string(i)));
    Proto opset;
    opset.str(1, "").varint(2, 17);
    Proto m;
    m.varint(1, 8).msg(8, opset).msg(7, g);
    auto loaded = load_proto(m);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
    CHECK(loaded->store().weights().size() == 500);
    REQUIRE(loaded->notes().size() == 1);
    CHECK(loaded->notes()[0].tensor == "w0");
    CHECK_MESSAGE(loaded->notes()[0].message.find("500 initializers are also graph inputs ('w0', 'w1', 'w2' and "
                                                  "497 more)") != std::string::npos,
                  loaded->notes()[0].message);
  }
  // A subgraph's inputs are its formal parameters, not the model's: no note.
  Proto body = graph({node("Identity", {"B"}, {"o"})}, {f32_tensor("B", {1.0f})});
  Proto in_body;
  in_body.str(1, "B");
  body.msg(11, in_body);
  auto sub = load_proto(model(graph({node("If", {"c"}, {"y"}, {attribute_graph("then_branch", body)})}, {})));
  REQUIRE_MESSAGE(sub.ok(), sub.error().to_string());
  CHECK(sub->notes().empty());
}

TEST_CASE("load_onnx maps the file: inline weights borrow from the live mapping") {
  ScratchDir dir("onnx-file");
  Proto m = model(graph({}, {f32_tensor("w", {1.0f, 2.0f})}));
  auto path = dir.write("model.onnx", m.data);
  Result<Model> loaded = load_onnx(path);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  Model model = std::move(loaded.value());  // moving keeps the mapping alive
  CHECK(model.file_size() == m.data.size());
  CHECK(model.path() == path);
  CHECK(bytes_named(model, "w") == le_floats({1.0f, 2.0f}));
  CHECK(weight_named(model, "w").storage == WeightRef::Storage::inline_borrowed);
  CHECK(model.store().mapping_count() == 0);  // the .onnx is an anchor, not an external mapping

  auto missing = load_onnx(dir / "nope.onnx");
  CHECK(missing.code() == ErrorCode::not_found);
  CHECK(missing.error().file.find("nope.onnx") != std::string::npos);
  CHECK(load_onnx(dir.path()).code() == ErrorCode::io);  // a directory
}

TEST_CASE("an empty input is an empty model") {
  auto r = load_onnx_from_bytes({}, ".");
  REQUIRE(r.ok());
  CHECK(r->store().weights().empty());
  CHECK(r->nodes().empty());
}

// NodeProto.name is optional (onnx.helper and many exporters leave it out):
// the node table names such a node "<op_type>#<index in nodes()>", unique
// against the names the file gives, and keeps given names as they are.
TEST_CASE("unnamed nodes are named <op_type>#<index>, unique, stable; named nodes keep their names") {
  Proto body = graph({named_node("", "Identity", {"a"}, {"b"})}, {});
  Proto m = model(graph({named_node("", "MatMul", {"x", "w"}, {"y"}),
                         named_node("first", "Relu", {"y"}, {"r"}),
                         named_node("", "Loop", {"", "c"}, {"o"}, {attribute_graph("body", body)}),
                         // A given name equal to what the rule would make for node 4:
                         named_node("MatMul#4", "Relu", {"r"}, {"r2"}),
                         named_node("", "MatMul", {"r2", "w"}, {"z"}),
                         named_node("", "", {"z"}, {"q"})},
                        {}));
  auto first = load_proto(m);
  REQUIRE_MESSAGE(first.ok(), first.error().to_string());
  const auto& nodes = first->nodes();
  REQUIRE(nodes.size() == 7);
  CHECK(nodes[0].name == "MatMul#0");
  CHECK(nodes[1].name == "first");
  CHECK(nodes[2].name == "Loop#2");
  CHECK(nodes[3].name == "Identity#3");  // the Loop body's node: after its parent, numbered in one sequence
  CHECK(nodes[3].depth == 1);
  CHECK(nodes[4].name == "MatMul#4");  // given
  CHECK(nodes[5].name == "MatMul#5");
  CHECK(nodes[6].name == "node#6");  // no op type either
  std::set<std::string_view> distinct;
  for (const NodeInfo& n : nodes) distinct.insert(n.name);
  CHECK(distinct.size() == nodes.size());

  // The same bytes opened again give the same names; and the views survive
  // moving the Model (a short generated name lives in its string's own bytes).
  auto again = load_proto(m);
  REQUIRE(again.ok());
  for (std::size_t i = 0; i < nodes.size(); ++i) CHECK(again->nodes()[i].name == nodes[i].name);
  Model moved = std::move(*again);
  CHECK(moved.nodes()[5].name == "MatMul#5");
}

TEST_CASE("a generated name that a given name already holds gets a #2 suffix") {
  // Node 1 is unnamed: the rule's "MatMul#1" is node 0's given name.
  Proto m = model(graph({named_node("MatMul#1", "MatMul", {"x", "w"}, {"y"}), named_node("", "MatMul", {"y", "w"}, {"z"}),
                         named_node("MatMul#1#2", "Relu", {"z"}, {"r"})},
                        {}));
  auto r = load_proto(m);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  CHECK(r->nodes()[0].name == "MatMul#1");
  CHECK(r->nodes()[1].name == "MatMul#1#3");  // #2 is taken too
  CHECK(r->nodes()[2].name == "MatMul#1#2");
}

// Names need not be unique in ONNX either: the first node keeps a repeated
// name, later ones take "#2", "#3", ... past every name in use.
TEST_CASE("a name the file gives twice stays with its first node; the others get #2, #3 suffixes") {
  Proto m = model(graph({named_node("dup", "MatMul", {"x", "w"}, {"y"}), named_node("dup", "MatMul", {"y", "w"}, {"z"}),
                         named_node("dup#2", "Relu", {"z"}, {"r"}), named_node("dup", "Relu", {"r"}, {"s"}),
                         named_node("", "Relu", {"s"}, {"t"}), named_node("Relu#4", "Relu", {"t"}, {"u"})},
                        {}));
  auto r = load_proto(m);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  const auto& nodes = r->nodes();
  CHECK(nodes[0].name == "dup");
  CHECK(nodes[1].name == "dup#3");  // #2 is a name the file gives node 2
  CHECK(nodes[2].name == "dup#2");
  CHECK(nodes[3].name == "dup#4");
  CHECK(nodes[4].name == "Relu#4#2");  // the rule's "Relu#4" is node 5's given name
  CHECK(nodes[5].name == "Relu#4");
  std::set<std::string_view> distinct;
  for (const NodeInfo& n : nodes) distinct.insert(n.name);
  CHECK(distinct.size() == nodes.size());
}

TEST_CASE("errors inside the subgraph of an unnamed node name it by the same rule") {
  Proto bad = tensor("bad_w", 1, {2});
  raw_data(bad, {1, 2, 3});
  Proto body = graph({}, {bad});
  Proto m = model(graph({named_node("", "Relu", {"x"}, {"c"}),
                         named_node("", "Loop", {"", "c"}, {"o"}, {attribute_graph("body", body)})},
                        {}));
  auto r = load_proto(m);
  REQUIRE(r.code() == ErrorCode::size_mismatch);
  CHECK_MESSAGE(r.error().context.find("node 'Loop#1'") != std::string::npos, r.error().to_string());
  CHECK(r.error().context.find("node ''") == std::string::npos);

  Proto no_output = model(graph({named_node("", "Constant", {}, {}, {attribute_int("value_int", 3)})}, {}));
  auto c = load_proto(no_output);
  REQUIRE(c.code() == ErrorCode::malformed);
  CHECK_MESSAGE(c.error().tensor == "Constant#0", c.error().to_string());
}
