// rank_model: a rank's shards as a Model under Residency (issue 29: each
// rank's memo, budget and strategies work on its shard only). On the ONNX
// model (MatMulNBits operands, strided MatMul columns, an inline weight) at
// 2 ranks, every derivation pinned through Residency, on every strategy
// and a tight paged budget, reads back byte for byte what place_rank
// derives directly; the auto budget is the rank's shard bytes plus its
// derivations; the shards' memory lives as long as the model.
#include "unit/dist/ranks.hpp"
#include "unit/shard/models.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/cooperative_load.hpp>
#include <ballast/residency.hpp>

using namespace ballast;
using namespace ballast::testing;

TEST_CASE("rank_model: Residency over a rank's shards derives what place_rank does, on every strategy") {
  ScratchDir dir("dist-rank-model");
  auto m = llm_onnx().write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  auto load = plan_cooperative_load(*m, *plans);
  REQUIRE(load.ok());
  auto whole_plan = plan_derivations(*m);
  REQUIRE_MESSAGE(whole_plan.ok(), whole_plan.error().to_string());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());

  for (std::uint32_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    // The reference: place_rank's direct launches over the same shards.
    auto loaded = load_all(*m, *plans, *load);
    auto placed = place_rank(**gpu, *m, plans->ranks[r], loaded[r], *whole_plan);
    REQUIRE_MESSAGE(placed.ok(), placed.error().to_string());
    std::vector<std::vector<std::byte>> want;
    for (const RankDerivedValue& v : placed->derived)
      want.push_back(read_pair(**gpu, v.launch.dst, v.first_bytes, v.launch.dst2, v.second_bytes));
    const std::vector<std::string> skipped = placed->skipped;
    const std::uint64_t shard_bytes = placed->shard_bytes;
    REQUIRE(placed->release().ok());

    auto ranked = rank_model(*m, plans->ranks[r], std::move(loaded[r]), *whole_plan);
    REQUIRE_MESSAGE(ranked.ok(), ranked.error().to_string());
    REQUIRE(ranked->derivations.size() == want.size());
    CHECK(ranked->skipped == skipped);
    CHECK(ranked->model.weight_order().size() == plans->ranks[r].weights.size());

    // planned[i] is the whole plan's entry: same kind, same weight.
    for (std::size_t i = 0; i < ranked->derivations.size(); ++i) {
      CHECK(ranked->derivations[i].kind() == (*whole_plan)[ranked->planned[i]].kind());
      CHECK(ranked->derivations[i].weight == (*whole_plan)[ranked->planned[i]].weight);
    }

    auto every = auto_budget(ranked->model.store(), ranked->derivations);
    REQUIRE(every.ok());
    // The rank's auto budget: its shards (inline in the rank model) and its derivations.
    std::uint64_t derived = 0;
    for (const auto& v : want) derived += v.size();
    CHECK(every->source_bytes == shard_bytes);
    CHECK(every->inline_bytes == shard_bytes);
    CHECK(every->derived_bytes >= derived);

    pin_on_every_strategy(**gpu, *ranked, want, [](ResidencyStrategy, const ResidencyStats&) {});
  }
}

TEST_CASE("rank_model: a shard set that is not the plan's is refused, naming the rank") {
  ScratchDir dir("dist-rank-model-bad");
  auto m = llm_onnx().write(dir);
  REQUIRE(m.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  auto bad = rank_model(*m, plans->ranks[1], RankShards{});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(bad.error().to_string().find("rank 1 of 2") != std::string::npos, bad.error().to_string());
  // Rank 0's shards with rank 1's plan: the same sizes (even splits), refused by rank.
  auto load = plan_cooperative_load(*m, *plans);
  REQUIRE(load.ok());
  auto loaded = load_all(*m, *plans, *load);
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  auto placed = place_rank(**gpu, *m, plans->ranks[1], loaded[0]);
  REQUIRE_FALSE(placed.ok());
  CHECK_MESSAGE(placed.error().to_string().find("the shards of rank 0 given with the plan of rank 1") != std::string::npos,
                placed.error().to_string());
  auto swapped = rank_model(*m, plans->ranks[1], std::move(loaded[0]));
  REQUIRE_FALSE(swapped.ok());
  CHECK(swapped.error().code == ErrorCode::invalid_argument);
}
