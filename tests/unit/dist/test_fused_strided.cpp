// A fused weight split on its inner axis (an ONNX MatMul B [K, N] whose N
// holds q, k and v, split by columns): the rank's shard is [K, its columns
// of every part], so each of its rows holds its columns of q, then of k,
// then of v, as its dims say and as the shard derivations read it. The
// parts used to land one after another (all of q's rows, then k's), which
// no [K, N / world] reader could use and which scrambled every derivation
// of such a shard. Checked against an element-by-element cut of the
// weight, not against a gather of the plan's views (which would repeat
// the same mistake), by the load (both exchanges) and in place.
#include "unit/shard/models.hpp"

#include <ballast/cooperative_load.hpp>

#include <thread>

using namespace ballast;
using namespace ballast::testing;

namespace {

constexpr std::uint64_t kK = 8, kN = 16, kElement = 2;  // float16 [K, N]: q 8, k 4, v 4 columns
const std::vector<std::uint64_t> kParts = {8, 4, 4};

// `inline_bytes`: the weight in the .onnx itself (a single-file export),
// which the load copies from its own model rather than reading a file.
Result<Model> fused_model(const ScratchDir& dir, bool inline_bytes) {
  using namespace onnx_proto;
  OnnxWriter w;
  const std::string b = inline_bytes ? w.add_inline("layers.0.attn.qkv_proj.weight", kFloat16, {kK, kN},
                                                    kK * kN * kElement, /*patterned=*/true)
                                     : w.add("layers.0.attn.qkv_proj.weight", kFloat16, {kK, kN}, kK * kN * kElement);
  w.nodes.push_back(named_node("layers.0.attn.qkv_proj", "MatMul", {"x", b}, {"qkv"}));
  return w.write(dir);
}

std::vector<ShardRule> fused_rules() { return {{"qkv", "*.qkv_proj.weight", ShardSplit::column, kParts, 0}}; }

// Row k of rank r's shard: its columns of each part in turn, from the whole weight.
std::vector<std::byte> expected(const Model& m, const WeightShard& s, std::uint32_t world, std::uint32_t rank) {
  const WeightRef& w = m.store().weights().at(s.id);
  const Bytes whole = *m.store().bytes(w);
  std::vector<std::byte> out;
  for (std::uint64_t k = 0; k < kK; ++k) {
    std::uint64_t start = 0;
    for (std::uint64_t part : kParts) {
      const std::uint64_t cols = part / world, first = start + rank * cols;
      const std::byte* row = whole.data() + (k * kN + first) * kElement;
      out.insert(out.end(), row, row + cols * kElement);
      start += part;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("a fused weight split on its inner axis: each shard row holds the rank's columns of every part") {
  ScratchDir dir("dist-fused-strided");
  for (bool inline_bytes : {false, true}) {
    CAPTURE(inline_bytes);
    auto m = fused_model(dir, inline_bytes);
    REQUIRE_MESSAGE(m.ok(), m.error().to_string());
    for (std::uint32_t world : {2u, 4u}) {
      CAPTURE(world);
      auto plans = plan_shards_all(*m, ShardSpec{world, 0, fused_rules()});
      REQUIRE_MESSAGE(plans.ok(), plans.error().to_string());
      const WeightShard& first = plans->ranks[0].weights.at(0);
      REQUIRE(first.strided.size() == 3);  // one view per part: the case at hand
      CHECK(first.dims == Dims{static_cast<std::int64_t>(kK), static_cast<std::int64_t>(kN / world)});
      auto load = plan_cooperative_load(*m, *plans);
      REQUIRE(load.ok());
      for (ExchangeMode mode : {ExchangeMode::messages, ExchangeMode::rounds}) {
        CAPTURE(mode == ExchangeMode::rounds);
        auto comms = make_local_communicators(world);
        REQUIRE(comms.ok());
        std::vector<std::optional<Result<RankShards>>> got(world);
        std::vector<std::thread> threads;
        for (std::uint32_t r = 0; r < world; ++r)
          threads.emplace_back([&, r] {
            CooperativeLoadOptions o;
            o.exchange = mode;
            o.read.chunk_bytes = 48;  // messages cut through rows
            o.read.engine = ReadEngine::threads;
            got[r] = cooperative_load(*m, *plans, *load, *(*comms)[r], o);
          });
        for (std::thread& t : threads) t.join();
        for (std::uint32_t r = 0; r < world; ++r) {
          CAPTURE(r);
          REQUIRE_MESSAGE(got[r]->ok(), got[r]->error().to_string());
          const std::span<std::byte> shard = (**got[r]).shards.at(0);
          CHECK(std::vector<std::byte>(shard.begin(), shard.end()) ==
                expected(*m, plans->ranks[r].weights[0], world, r));
        }
      }
      for (std::uint32_t r = 0; r < world; ++r) {
        CAPTURE(r);
        auto in_place = shards_in_place(*m, plans->ranks[r]);
        REQUIRE_MESSAGE(in_place.ok(), in_place.error().to_string());
        const std::span<std::byte> shard = in_place->shards.at(0);
        CHECK(std::vector<std::byte>(shard.begin(), shard.end()) == expected(*m, plans->ranks[r].weights[0], world, r));
      }
      // One slice per part writes dense rows of that part alone: refused,
      // rather than a part-after-part array.
      auto launch = gather_launch(*m, first, 0, 0x1000);
      REQUIRE_FALSE(launch.ok());
      CHECK(launch.code() == ErrorCode::unsupported);
      CHECK(launch.error().to_string().find("qkv_proj") != std::string::npos);
    }
  }
}
