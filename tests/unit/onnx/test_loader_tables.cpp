// The loader's cheap-open structures: Dims, the name table, the node table
// and value ids built on first use (also from many threads at once), views
// that survive moving the Model, the shared ExternalFile, and the byte
// pattern fast path for external_data entries against the general reader.
#include "unit/onnx/external_fixture.hpp"

#include "onnx/name_table.hpp"

#include <ballast/dims.hpp>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;

TEST_CASE("Dims keeps six dims inline, spills beyond, and copies, moves and compares by value") {
  Dims small{2, 3, 4};
  CHECK(small.size() == 3);
  CHECK(small == std::vector<std::int64_t>{2, 3, 4});
  Dims big;
  for (std::int64_t d = 1; d <= 9; ++d) big.push_back(d);  // rank 9: on the heap
  CHECK(big.size() == 9);
  CHECK(big[8] == 9);
  Dims copy = big;
  CHECK(copy == big);
  copy[0] = 100;
  CHECK(big[0] == 1);  // a deep copy
  Dims moved = std::move(big);
  CHECK(moved.size() == 9);
  CHECK(big.empty());  // NOLINT: moved-from is empty by contract
  Dims from_inline = std::move(small);
  CHECK(from_inline == std::vector<std::int64_t>{2, 3, 4});
  from_inline = {7};
  CHECK(from_inline.to_vector() == std::vector<std::int64_t>{7});
  CHECK_FALSE(from_inline == std::vector<std::int64_t>{7, 1});
  CHECK(element_count(Dims{2, 3, 4}) == 24);
}

TEST_CASE("NameTable hands out dense ids, finds them again across rehashes, and keeps names stable") {
  onnx::NameTable table;
  std::vector<std::string> names;
  for (int i = 0; i < 20000; ++i) names.push_back("layers." + std::to_string(i) + (i % 3 == 0 ? ".weight" : ""));
  names.push_back("");
  names.push_back(std::string(40000, 'x'));  // larger than a quarter chunk: a chunk of its own
  std::vector<std::string_view> first_views;
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(table.intern(names[i]) == i);
    first_views.push_back(table.name(static_cast<std::uint32_t>(i)));
  }
  CHECK(table.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(table.intern(names[i]) == i);  // interning again changes nothing
    CHECK(table.find(names[i]) == i);
    CHECK(table.name(static_cast<std::uint32_t>(i)) == names[i]);
    CHECK(table.name(static_cast<std::uint32_t>(i)).data() == first_views[i].data());  // never moved
  }
  CHECK_FALSE(table.find("layers.20000").has_value());
  CHECK(table.name(static_cast<std::uint32_t>(names.size())).empty());
}

namespace {
Proto two_layer_model() {
  Proto w1 = tensor("w1", 1, {1});
  raw_data(w1, {0, 0, 128, 63});
  Proto w2 = tensor("w2", 1, {1});
  raw_data(w2, {0, 0, 0, 64});
  return model(graph({node("Mul", {"x", "w1"}, {"h"}, {attribute_int("axis", 1), attribute_int("axis", 3)}),
                      node("Add", {"h", "", "w2"}, {"y"})},
                     {w1, w2}));
}
}  // namespace

TEST_CASE("node table and activation ids are built on first use and survive moving the Model") {
  const Proto m = two_layer_model();
  auto opened = load_proto(m);
  REQUIRE_MESSAGE(opened.ok(), opened.error().to_string());
  Model model = std::move(*opened);  // views and spans must not point into the moved-from object
  const auto& nodes = model.nodes();
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].op_type == "Mul");
  CHECK(nodes[0].name == "Mul_node");
  REQUIRE(nodes[0].inputs.size() == 2);
  CHECK(nodes[0].inputs[1] == "w1");
  CHECK(nodes[0].int_attribute("axis") == 3);  // the last one written wins, as in protobuf
  CHECK(nodes[0].int_attributes.size() == 2);
  REQUIRE(nodes[1].inputs.size() == 3);
  CHECK(nodes[1].inputs[1].empty());
  CHECK(nodes[1].outputs[0] == "y");

  Model again = std::move(model);
  CHECK(&again.nodes() == &nodes);  // the same table, not rebuilt
  CHECK(again.nodes()[1].outputs[0] == "y");
  // Weights and activations all have ids, each name exactly one.
  std::vector<std::uint32_t> ids;
  for (std::string_view v : {"x", "w1", "h", "w2", "y"}) {
    auto id = again.value_id(v);
    REQUIRE_MESSAGE(id.has_value(), v);
    CHECK(again.value_name(*id) == v);
    ids.push_back(id->index);
  }
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());
  CHECK_FALSE(again.value_id("nowhere").has_value());
  const ValueId fresh = again.intern("added.by.engine");
  CHECK(again.value_name(fresh) == "added.by.engine");
}

namespace {
// A chain of `count` Mul nodes, each with its own weight: enough nodes that
// the first calls below overlap the table build (run under TSan too).
Proto chain_model(int count) {
  Proto g;
  g.str(2, "chain");
  for (int i = 0; i < count; ++i) {
    const std::string x = "x" + std::to_string(i), w = "w" + std::to_string(i), y = "x" + std::to_string(i + 1);
    g.msg(1, node("Mul", {x, w}, {y}, {attribute_int("axis", i)}));
  }
  for (int i = 0; i < count; ++i) {
    Proto t = tensor("w" + std::to_string(i), 1, {1});
    raw_data(t, {0, 0, 128, 63});
    g.msg(5, t);
  }
  return model(g);
}
}  // namespace

TEST_CASE("the first nodes()/value_id() calls may race: every thread sees the same complete tables") {
  constexpr int kNodes = 3000;
  const Proto m = chain_model(kNodes);
  auto model = load_proto(m);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const Model& shared = *model;
  std::atomic<bool> go{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      if (t % 2 == 0) {
        const auto& nodes = shared.nodes();
        if (nodes.size() != kNodes || nodes.back().outputs[0] != "x" + std::to_string(kNodes) ||
            nodes[t].int_attribute("axis") != t)
          ++wrong;
      }
      const std::string name = "x" + std::to_string(kNodes - t);  // an activation: numbered on first use
      auto id = shared.value_id(name);
      if (!id || shared.value_name(*id) != name) ++wrong;
    });
  }
  go = true;
  for (auto& th : threads) th.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("external weights in one file share one ExternalFile") {
  ScratchDir dir("tables-shared-file");
  dir.write_pattern("blob.bin", 256);
  auto model = load_written(dir, {external_tensor("a", 4, at("blob.bin", 0)), external_tensor("b", 4, at("blob.bin", 16)),
                                  external_tensor("c", 4, at("./blob.bin", 32))});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const auto& a = *weight_named(*model, "a").external;
  const auto& b = *weight_named(*model, "b").external;
  const auto& c = *weight_named(*model, "c").external;
  CHECK(a.file.get() == b.file.get());
  CHECK(c.location() == "./blob.bin");  // as written: another spelling gets its own record...
  CHECK(c.resolved() == a.resolved());   // ...of the same file
  CHECK(model->store().mapping_count() == 1);
}

TEST_CASE("external_data entries: the byte-pattern fast path and the general reader agree") {
  ScratchDir dir("tables-entries");
  dir.write_pattern("blob.bin", 4096);
  const std::string long_dir(150, 'd');  // a location over 127 bytes: two-byte length, general reader
  dir.write_pattern(long_dir + "/blob.bin", 4096);
  // Value before key, and an entry split across two fields of the same
  // number (protobuf: the last wins): both only the general reader handles.
  auto reversed_entry = [](std::string_view k, std::string_view v) {
    Proto e;
    e.str(2, v).str(1, k);
    return e;
  };
  Proto odd = tensor("odd", 1, {4});
  odd.msg(13, reversed_entry("location", "blob.bin"));
  {
    Proto e;
    e.str(1, "offset").str(2, "999").str(2, "64");
    odd.msg(13, e);
  }
  odd.varint(14, 1);
  auto model = load_written(dir, {external_tensor("plain", 4, at("blob.bin", 64)), odd,
                                  external_tensor("long", 4, at(long_dir + "/blob.bin", 64))});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  for (std::string_view name : {"plain", "odd", "long"}) {
    CAPTURE(name);
    const auto& ext = *weight_named(*model, name).external;
    CHECK(ext.offset == 64);
    CHECK(ext.length == 16);
    CHECK(bytes_named(*model, name) == bytes_named(*model, "plain"));
  }
  CHECK(weight_named(*model, "long").external->location() == long_dir + "/blob.bin");
}

TEST_CASE("the node table does not depend on the store: moving the store out keeps nodes() and ids working") {
  ScratchDir dir("tables-store-moved");
  const Proto m = two_layer_model();
  Result<Model> opened = load_onnx(dir.write("model.onnx", m.data));
  REQUIRE_MESSAGE(opened.ok(), opened.error().to_string());
  {
    WeightStore taken = std::move(opened->store());  // the store's hold on the .onnx mapping goes with it...
    CHECK(taken.weights().size() == 2);
  }  // ...and ends here
  const auto& nodes = opened->nodes();  // built now, from the mapped file
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].inputs[1] == "w1");
  auto h = opened->value_id("h");
  REQUIRE(h.has_value());
  CHECK(opened->value_name(*h) == "h");
}

TEST_CASE("a default-built ExternalLocation reads as empty, not as a null dereference") {
  ExternalLocation loc;
  CHECK(loc.location().empty());
  CHECK(loc.resolved().empty());
  WeightRef w;
  w.storage = WeightRef::Storage::external;
  w.external = loc;
  WeightStore store;
  CHECK_FALSE(store.bytes(w).has_value());
  CHECK_FALSE(store.external_mmap_provenance(w).has_value());
}
