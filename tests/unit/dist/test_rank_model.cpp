// rank_model: a rank's shards as a Model under Residency (issue 29: each
// rank's memo, budget and strategies work on its shard only). On the ONNX
// model (MatMulNBits operands, strided MatMul columns, an inline weight) at
// 2 ranks, every derivation pinned through Residency, on every strategy
// and a tight paged budget, reads back byte for byte what place_rank
// derives directly; the auto budget is the rank's shard bytes plus its
// derivations; the shards' memory lives as long as the model.
#include "unit/shard/models.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/cooperative_load.hpp>
#include <ballast/residency.hpp>

#include <chrono>
#include <thread>

using namespace ballast;
using namespace ballast::testing;
using namespace std::chrono_literals;

namespace {

std::vector<Result<RankShards>> load_all(const Model& m, const ShardPlans& plans, const CooperativeLoadPlan& load) {
  auto comms = make_local_communicators(static_cast<std::uint32_t>(plans.ranks.size()));
  REQUIRE(comms.ok());
  std::vector<Result<RankShards>> out;
  for (std::size_t r = 0; r < plans.ranks.size(); ++r) out.emplace_back(make_error(ErrorCode::internal, "did not run"));
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < plans.ranks.size(); ++r)
    threads.emplace_back([&, r] { out[r] = cooperative_load(m, plans, load, *(*comms)[r]); });
  for (std::thread& t : threads) t.join();
  return out;
}

std::vector<std::byte> read_back(GpuBackend& gpu, DevicePtr at, std::uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  REQUIRE(gpu.copy_to_host(out, at, 0).ok());
  return out;
}

}  // namespace

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
    for (auto& l : loaded) REQUIRE_MESSAGE(l.ok(), l.error().to_string());
    auto placed = place_rank(**gpu, *m, plans->ranks[r], *loaded[r], *whole_plan);
    REQUIRE_MESSAGE(placed.ok(), placed.error().to_string());
    std::vector<std::vector<std::byte>> want;
    for (const RankDerivedValue& v : placed->derived) {
      std::vector<std::byte> bytes = read_back(**gpu, v.launch.dst, v.first_bytes);
      if (v.second_bytes > 0) {
        const auto second = read_back(**gpu, v.launch.dst2, v.second_bytes);
        bytes.insert(bytes.end(), second.begin(), second.end());
      }
      want.push_back(std::move(bytes));
    }
    const std::vector<std::string> skipped = placed->skipped;
    const std::uint64_t shard_bytes = placed->shard_bytes;
    REQUIRE(placed->release().ok());

    auto ranked = rank_model(*m, plans->ranks[r], std::move(*loaded[r]), *whole_plan);
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

    struct Case {
      const char* name;
      ResidencyStrategy strategy;
      std::optional<std::uint64_t> budget;
    };
    std::uint64_t largest = 0;
    for (const auto& v : want) largest = std::max<std::uint64_t>(largest, v.size());
    for (const Case& c : {Case{"upload", ResidencyStrategy::upload, std::nullopt},
                          Case{"zero_copy", ResidencyStrategy::zero_copy, std::nullopt},
                          Case{"paged auto", ResidencyStrategy::paged, std::nullopt},
                          Case{"paged tight", ResidencyStrategy::paged, every->total / 3}}) {
      CAPTURE(c.name);
      ResidencyOptions o;
      o.strategy = c.strategy;
      o.budget_bytes = c.budget;
      o.derivations = ranked->derivations;
      auto res = Residency::create(**gpu, ranked->model, o);
      REQUIRE_MESSAGE(res.ok(), res.error().to_string());
      if (c.strategy == ResidencyStrategy::paged && !c.budget) CHECK((*res)->budget() == every->total);
      for (std::size_t i = 0; i < ranked->derivations.size(); ++i) {
        CAPTURE(i);
        auto pinned = (*res)->pin(ranked->derivations[i]);
        REQUIRE_MESSAGE(pinned.ok(), pinned.error().to_string());
        std::vector<std::byte> got = read_back(**gpu, pinned->first(), pinned->first_bytes());
        if (pinned->second_bytes() > 0) {
          const auto second = read_back(**gpu, pinned->second(), pinned->second_bytes());
          got.insert(got.end(), second.begin(), second.end());
        }
        CHECK(got == want[i]);
      }
      const ResidencyStats stats = (*res)->stats();
      CHECK(stats.peak_device_bytes <= stats.budget_bytes);
      if (c.budget) CHECK(stats.derived_evictions + stats.source_evictions > 0);
      REQUIRE((*res)->release(**gpu).status.ok());
    }
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
  REQUIRE(loaded[0].ok());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  auto placed = place_rank(**gpu, *m, plans->ranks[1], *loaded[0]);
  REQUIRE_FALSE(placed.ok());
  CHECK_MESSAGE(placed.error().to_string().find("the shards of rank 0 given with the plan of rank 1") != std::string::npos,
                placed.error().to_string());
  auto swapped = rank_model(*m, plans->ranks[1], std::move(*loaded[0]));
  REQUIRE_FALSE(swapped.ok());
  CHECK(swapped.error().code == ErrorCode::invalid_argument);
}
