// Models whose nodes have no names (NodeProto.name is optional), or share
// one: every consumer of the node table's names (the plan's node fields and
// errors, derive --dump's file stems, replay's step labels) sees the made
// "<op_type>#<index>" or "<name>#2" names, unique per node.
#include "support/derived_dump.hpp"
#include "support/replay_walk.hpp"

#include "unit/onnx/load_helpers.hpp"

#include <ballast/derive.hpp>
#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;

namespace {

std::vector<std::uint8_t> f32(std::size_t n, float scale) {
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = scale * static_cast<float>(1 + i % 5);
  std::vector<std::uint8_t> out(n * 4);
  std::memcpy(out.data(), f.data(), out.size());
  return out;
}

Proto nbits_node(std::string_view scales, std::string_view out, bool with_k = true, std::string_view name = "") {
  if (!with_k)
    return named_node(name, "MatMulNBits", {"X", "B", scales}, {out},
                      {attribute_int("N", 4), attribute_int("bits", 4), attribute_int("block_size", 32)},
                      "com.microsoft");
  return named_node(
      name, "MatMulNBits", {"X", "B", scales}, {out},
      {attribute_int("K", 64), attribute_int("N", 4), attribute_int("bits", 4), attribute_int("block_size", 32)},
      "com.microsoft");
}

// Node 0: Relu; 1: MatMul on W; 2 and 3: MatMulNBits on one B under two
// scales. No node has a name (or, with `same_name`, both MatMulNBits nodes
// are "dup": ONNX does not require names to be unique). `with_k` false drops
// node 3's K.
Proto unnamed_model(bool with_k = true, std::string_view same_name = "") {
  Proto w = tensor("W", 1, {8, 16});
  raw_data(w, f32(8 * 16, 0.25f));
  Proto b = tensor("B", 2, {4, 2, 16});
  raw_data(b, std::vector<std::uint8_t>(4 * 2 * 16, 0x5a));
  Proto sa = tensor("scales_a", 1, {8});
  raw_data(sa, f32(8, 0.01f));
  Proto sb = tensor("scales_b", 1, {8});
  raw_data(sb, f32(8, 0.5f));
  return model(graph({named_node("", "Relu", {"X0"}, {"X"}), named_node("", "MatMul", {"X", "W"}, {"Y"}),
                      nbits_node("scales_a", "Q1", true, same_name), nbits_node("scales_b", "Q2", with_k, same_name)},
                     {w, b, sa, sb}));
}

}  // namespace

TEST_CASE("the plan of an unnamed model names each consumer by its generated node name") {
  const Proto bytes = unnamed_model();
  auto m = load_proto(bytes);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_derivations(*m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  std::set<std::string> nbits_nodes;
  for (const PlannedDerivation& p : *plan) {
    CHECK_FALSE(p.node.empty());
    if (p.weight == "W") CHECK(p.node == "MatMul#1");
    if (p.weight == "B") nbits_nodes.insert(p.node);
  }
  CHECK(nbits_nodes == std::set<std::string>{"MatMulNBits#2", "MatMulNBits#3"});
}

TEST_CASE("derive --dump's stems of an unnamed model are unique: a shared B is told apart by its nodes") {
  const Proto bytes = unnamed_model();
  auto m = load_proto(bytes);
  REQUIRE(m.ok());
  auto plan = plan_derivations(*m);
  REQUIRE(plan.ok());
  const std::vector<std::string> stems = ballast::cli::dump_stems(*plan);
  REQUIRE(stems.size() == plan->size());
  std::set<std::pair<std::string, int>> files;
  for (std::size_t i = 0; i < stems.size(); ++i) {
    const PlannedDerivation& p = (*plan)[i];
    CHECK_MESSAGE(files.emplace(stems[i], static_cast<int>(p.kind())).second, "two dumps named " << stems[i]);
    if (p.weight == "W") CHECK(stems[i] == "W");  // one consumer: the weight's name alone
    if (p.weight == "B") CHECK(stems[i] == "B@" + p.node);
  }
  CHECK(files.count({"B@MatMulNBits#2", static_cast<int>(Derivation::dequant_int4)}) == 1);
  CHECK(files.count({"B@MatMulNBits#3", static_cast<int>(Derivation::dequant_int4)}) == 1);
}

TEST_CASE("replay's steps of an unnamed model are labelled with the generated node names") {
  const Proto bytes = unnamed_model();
  auto m = load_proto(bytes);
  REQUIRE(m.ok());
  auto walk = ballast::cli::build_walk(*m, ballast::cli::DerivedMode::first);
  REQUIRE_MESSAGE(walk.ok(), walk.error().to_string());
  std::vector<std::string> labels;
  for (const auto& s : walk->steps) labels.push_back(s.label);
  CHECK(labels == std::vector<std::string>{"MatMul#1: transpose of W", "MatMulNBits#2: dequant_int4 of B",
                                           "MatMulNBits#3: dequant_int4 of B"});
}

TEST_CASE("a planner error on an unnamed node names it by the generated name, never ''") {
  const Proto bytes = unnamed_model(/*with_k=*/false);
  auto m = load_proto(bytes);
  REQUIRE(m.ok());
  auto plan = plan_derivations(*m);
  REQUIRE_FALSE(plan.ok());
  const std::string text = plan.error().to_string();
  CHECK_MESSAGE(text.find("MatMulNBits node 'MatMulNBits#3'") != std::string::npos, text);
  CHECK(text.find("''") == std::string::npos);
  CHECK(plan.error().tensor == "MatMulNBits#3");
}

TEST_CASE("two consumers of one B that share a node name get unique plan nodes and dump stems") {
  const Proto bytes = unnamed_model(/*with_k=*/true, "dup");
  auto m = load_proto(bytes);
  REQUIRE(m.ok());
  auto plan = plan_derivations(*m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  const std::vector<std::string> stems = ballast::cli::dump_stems(*plan);
  std::set<std::string> b_stems, b_nodes;
  for (std::size_t i = 0; i < stems.size(); ++i)
    if ((*plan)[i].weight == "B") b_stems.insert(stems[i]), b_nodes.insert((*plan)[i].node);
  CHECK(b_nodes == std::set<std::string>{"dup", "dup#2"});
  CHECK(b_stems == std::set<std::string>{"B@dup", "B@dup#2"});
}

TEST_CASE("a weight named like another's <weight>@<node> stem gets a stem of its own") {
  // The plan as the planner would give it: B shared by two nodes, and a
  // weight literally named "B@n1" with one consumer, all dequant_int4; two
  // node-less entries of one weight with one `why`.
  auto entry = [](std::string weight, std::string node, Derivation kind, std::string why = "") {
    PlannedDerivation p;
    p.weight = std::move(weight);
    p.node = std::move(node);
    p.why = std::move(why);
    p.launch.kind = kind;
    return p;
  };
  const std::vector<PlannedDerivation> plan = {
      entry("B@n1", "n0", Derivation::dequant_int4),     entry("B", "n1", Derivation::dequant_int4),
      entry("B", "n2", Derivation::dequant_int4),        entry("B@n1", "n0", Derivation::transpose),
      entry("C", "", Derivation::to_f16, "weight rule"), entry("C", "", Derivation::to_f16, "weight rule"),
  };
  const std::vector<std::string> stems = ballast::cli::dump_stems(plan);
  CHECK(stems == std::vector<std::string>{"B@n1", "B@n1#2", "B@n2", "B@n1", "C@weight rule", "C@weight rule#2"});
}
