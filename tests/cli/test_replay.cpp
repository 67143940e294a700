// replay's walk and summary. The walk through forwarding nodes: a weight a
// MatMul reads through a Transpose or an Identity is pinned as the
// consumer's derived value, and the forwarding node itself pins nothing (the
// engine runs the consumer on the derived value; a source step there would
// page in bytes no kernel reads). The summary: steady-state ratios only
// where their denominators were measured.
#include "support/replay_report.hpp"
#include "support/replay_walk.hpp"

#include "unit/onnx/load_helpers.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;

namespace {

// t: Transpose(W) -> WT; mm: MatMul(X, WT); id: Identity(V) -> Vi;
// mm2: MatMul(Y, Vi); add: Add(Z, b), b a weight nothing derives from;
// keep: Relu(W), a non-forwarding reader of W, which pins W as stored.
Proto forwarding_model(bool with_direct_reader) {
  Proto w = tensor("W", 1, {16, 8});
  raw_data(w, std::vector<std::uint8_t>(16 * 8 * 4, 0x3c));
  Proto v = tensor("V", 1, {16, 8});
  raw_data(v, std::vector<std::uint8_t>(16 * 8 * 4, 0x3d));
  Proto b = tensor("b", 1, {8});
  raw_data(b, std::vector<std::uint8_t>(8 * 4, 0x3e));
  Proto g = graph({named_node("t", "Transpose", {"W"}, {"WT"}, {attribute_ints("perm", {1, 0})}),
                   named_node("mm", "MatMul", {"X", "WT"}, {"Y"}), named_node("id", "Identity", {"V"}, {"Vi"}),
                   named_node("mm2", "MatMul", {"Y", "Vi"}, {"Z"}), named_node("add", "Add", {"Z", "b"}, {"out"})},
                  {w, v, b});
  if (with_direct_reader) g.msg(1, named_node("keep", "Relu", {"W"}, {"Wr"}));
  return model(g);
}

std::vector<std::string> labels(const Model& m, cli::DerivedMode mode) {
  auto walk = cli::build_walk(m, mode);
  REQUIRE_MESSAGE(walk.ok(), walk.error().to_string());
  std::vector<std::string> out;
  for (const auto& s : walk->steps) out.push_back(s.label);
  return out;
}

}  // namespace

TEST_CASE("replay's walk: a weight read through Transpose or Identity is pinned derived at its consumer only") {
  const Proto bytes = forwarding_model(false);
  auto m = load_proto(bytes);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(labels(*m, cli::DerivedMode::first) ==
        std::vector<std::string>{"mm: transpose of W", "mm2: transpose of V", "add: b"});
  CHECK(labels(*m, cli::DerivedMode::all) ==
        std::vector<std::string>{"mm: transpose of W", "mm: to_f16 of W", "mm: quant_int8 of W", "mm2: transpose of V",
                                 "mm2: to_f16 of V", "mm2: quant_int8 of V", "add: b"});
  // With no derived values, the forwarding nodes read the weights as stored.
  CHECK(labels(*m, cli::DerivedMode::none) == std::vector<std::string>{"t: W", "id: V", "add: b"});
}

TEST_CASE("replay's walk: a forwarding node's weight that another node reads directly is still a source there") {
  const Proto bytes = forwarding_model(true);
  auto m = load_proto(bytes);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  CHECK(labels(*m, cli::DerivedMode::first) ==
        std::vector<std::string>{"mm: transpose of W", "mm2: transpose of V", "add: b", "keep: W"});
}

TEST_CASE("replay's summary: the steady state skips token 1, and a ratio needs a measured denominator") {
  cli::Walk walk;
  walk.touched_bytes = 1000;
  auto token = [](double seconds, std::uint64_t paged, double paging) {
    cli::ReplayToken t;
    t.seconds = seconds;
    t.paged_in_bytes = paged;
    t.paging_seconds = paging;
    return t;
  };

  // One token: no steady state, so no ratio at all (not a read of an empty value).
  const cli::ReplaySummary one({token(1.0, 500, 0.5)}, walk, 600);
  CHECK(one.minimum == 400);
  CHECK_FALSE(one.steady_seconds.has_value());
  CHECK_FALSE(one.token_vs_page_ins().has_value());
  CHECK_FALSE(one.ratio.has_value());

  // Tokens 2 and 3 make the steady state; token 1 (cold) is left out.
  const cli::ReplaySummary paged({token(9.0, 900, 8.0), token(0.4, 300, 0.2), token(0.6, 500, 0.3)}, walk, 600);
  REQUIRE(paged.steady_seconds.has_value());
  CHECK(*paged.steady_seconds == doctest::Approx(0.5));
  CHECK(*paged.steady_paged_bytes == doctest::Approx(400.0));
  CHECK(*paged.ratio == doctest::Approx(1.0));  // 400 paged per token against the 400 the budget forces
  REQUIRE(paged.token_vs_page_ins().has_value());
  CHECK(*paged.token_vs_page_ins() == doctest::Approx(0.5 / 0.25));
  CHECK(*paged.paging_bps == doctest::Approx(800.0 / 0.5));

  // Nothing paged in the steady state (everything fits): no page-in time to
  // divide by, so no token / page-in ratio, and no paging rate.
  const cli::ReplaySummary resident({token(2.0, 900, 1.0), token(0.4, 0, 0.0), token(0.6, 0, 0.0)}, walk,
                                    kUnlimitedBudget);
  CHECK(resident.minimum == 0);
  REQUIRE(resident.steady_seconds.has_value());
  CHECK_FALSE(resident.token_vs_page_ins().has_value());
  CHECK_FALSE(resident.paging_bps.has_value());
  CHECK_FALSE(resident.ratio.has_value());
}
