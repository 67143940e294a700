// share_row_maxima: quant_int8 of a row-parallel weight across ranks
// (issue 29). At 2 and 4 ranks as threads (local communicator), each
// rank's codes of o_proj (a MatMul B [K, N] split on K, quantized per
// output channel over K) are its columns of the single-process codes and
// its scales the single-process scales, byte for byte, by place_rank and by
// rank_model under Residency; a failed or silent peer fails the exchange
// naming it, with nothing shared; two launches that differ only in their
// maxima never share a memo entry or an identity.
#include "unit/dist/ranks.hpp"
#include "unit/shard/models.hpp"

#include "derive/identity.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/cooperative_load.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/residency.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <cstring>
#include <thread>

using namespace ballast;
using namespace ballast::testing;
using namespace std::chrono_literals;

namespace {

// The single-process derive's outputs of plan[i]: codes then scales.
std::pair<std::vector<std::byte>, std::vector<std::byte>> single(GpuBackend& gpu, const Model& m,
                                                                 std::span<const PlannedDerivation> plan,
                                                                 std::size_t i) {
  ResidencyOptions o;
  o.derivations = std::vector<PlannedDerivation>(plan.begin(), plan.end());
  auto res = Residency::create(gpu, m, o);
  REQUIRE_MESSAGE(res.ok(), res.error().to_string());
  std::pair<std::vector<std::byte>, std::vector<std::byte>> out;
  {
    auto pinned = (*res)->pin(plan[i]);
    REQUIRE_MESSAGE(pinned.ok(), pinned.error().to_string());
    out = std::make_pair(read_back(gpu, pinned->first(), pinned->first_bytes()),
                         read_back(gpu, pinned->second(), pinned->second_bytes()));
  }
  REQUIRE((*res)->release(gpu).status.ok());
  return out;
}

}  // namespace

TEST_CASE("share_row_maxima: a row-parallel quant_int8's ranks joined are the single-process derive, byte for byte") {
  ScratchDir dir("dist-row-maxima");
  auto m = llm_onnx().write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_derivations(*m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  std::size_t o_quant = plan->size();
  for (std::size_t i = 0; i < plan->size(); ++i)
    if ((*plan)[i].weight == "layers.0.attn.o_proj.weight" && (*plan)[i].kind() == Derivation::quant_int8) o_quant = i;
  REQUIRE(o_quant < plan->size());
  const auto [codes, scales] = single(**gpu, *m, *plan, o_quant);
  const std::uint64_t n = (*plan)[o_quant].launch.rows, k = (*plan)[o_quant].launch.cols;
  REQUIRE(codes.size() == n * k);
  REQUIRE(scales.size() == 4 * n);

  for (std::uint32_t world : {2u, 4u}) {
    CAPTURE(world);
    auto plans = plan_shards_all(*m, ShardSpec{world, 0, {}});
    REQUIRE(plans.ok());
    auto load = plan_cooperative_load(*m, *plans);
    REQUIRE(load.ok());
    const std::uint64_t part = k / world;
    std::vector<std::byte> joined(n * k);   // the ranks' codes, each in its columns
    std::vector<std::byte> joined_resident(n * k);
    std::vector<RankShards> shards = load_all(*m, *plans, *load, *plan);
    for (std::uint32_t r = 0; r < world; ++r) {
      CAPTURE(r);
      REQUIRE(shards[r].row_maxima.size() >= 1);
      // Direct: place_rank.
      auto placed = place_rank(**gpu, *m, plans->ranks[r], shards[r], *plan);
      REQUIRE_MESSAGE(placed.ok(), placed.error().to_string());
      for (const std::string& s : placed->skipped) CHECK_MESSAGE(s.rfind("quant_int8 ", 0) != 0, s);
      bool found = false;
      for (const RankDerivedValue& v : placed->derived) {
        if (v.planned != o_quant) continue;
        found = true;
        CHECK(v.launch.kind == Derivation::quant_int8_given_max);
        REQUIRE(v.first_bytes == n * part);
        const auto mine = read_back(**gpu, v.launch.dst, v.first_bytes);
        for (std::uint64_t row = 0; row < n; ++row)
          std::memcpy(joined.data() + row * k + r * part, mine.data() + row * part, part);
        CHECK(read_back(**gpu, v.launch.dst2, v.second_bytes) == scales);
      }
      CHECK(found);
      REQUIRE(placed->release().ok());

      // Under Residency: rank_model, the maxima a weight of the rank's model.
      auto ranked = rank_model(*m, plans->ranks[r], std::move(shards[r]), *plan);
      REQUIRE_MESSAGE(ranked.ok(), ranked.error().to_string());
      CHECK(ranked->skipped == placed->skipped);
      ResidencyOptions o;
      o.strategy = ResidencyStrategy::paged;
      o.derivations = ranked->derivations;
      auto res = Residency::create(**gpu, ranked->model, o);
      REQUIRE_MESSAGE(res.ok(), res.error().to_string());
      found = false;
      for (std::size_t i = 0; i < ranked->derivations.size(); ++i) {
        if (ranked->planned[i] != o_quant) continue;
        found = true;
        const PlannedDerivation& q = ranked->derivations[i];
        CHECK(q.kind() == Derivation::quant_int8_given_max);
        REQUIRE(q.scales.has_value());
        {
          auto pinned = (*res)->pin(q);
          REQUIRE_MESSAGE(pinned.ok(), pinned.error().to_string());
          const auto mine = read_back(**gpu, pinned->first(), pinned->first_bytes());
          REQUIRE(mine.size() == n * part);
          for (std::uint64_t row = 0; row < n; ++row)
            std::memcpy(joined_resident.data() + row * k + r * part, mine.data() + row * part, part);
          CHECK(read_back(**gpu, pinned->second(), pinned->second_bytes()) == scales);
        }
        // The alias case: the same launch over another scales operand is
        // another value (identity and memo key), never the first one's.
        PlannedDerivation other = q;
        other.scales = q.source;
        const WeightStore& store = ranked->model.store();
        CHECK(identity::of_derivation(store, other) != identity::of_derivation(store, q));
        PlannedDerivation plain = q;
        plain.launch.kind = Derivation::quant_int8;
        plain.scales.reset();
        CHECK(identity::of_derivation(store, plain) != identity::of_derivation(store, q));
      }
      CHECK(found);
      REQUIRE((*res)->release(**gpu).status.ok());
    }
    CHECK(joined == codes);
    CHECK(joined_resident == codes);
  }
}

TEST_CASE("share_row_maxima: a peer that failed, or never comes, fails the exchange naming it; nothing is shared") {
  ScratchDir dir("dist-row-maxima-fail");
  auto m = llm_onnx().write(dir);
  REQUIRE(m.ok());
  auto plan = plan_derivations(*m);
  REQUIRE(plan.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  auto load = plan_cooperative_load(*m, *plans);
  REQUIRE(load.ok());

  for (bool silent : {false, true}) {
    CAPTURE(silent);
    auto comms = make_local_communicators(2);
    REQUIRE(comms.ok());
    std::vector<std::optional<Result<RankShards>>> loaded(2);
    {
      std::vector<std::thread> threads;
      for (std::uint32_t r = 0; r < 2; ++r)
        threads.emplace_back([&, r] { loaded[r] = cooperative_load(*m, *plans, *load, *(*comms)[r]); });
      for (std::thread& t : threads) t.join();
    }
    for (auto& l : loaded) REQUIRE(l->ok());
    // Rank 1 fails before its maxima (or says nothing at all).
    if (!silent) (*comms)[1]->fail(make_error(ErrorCode::io, "its disk went away"));
    const auto started = std::chrono::steady_clock::now();
    RankShards& mine = **loaded[0];
    const Status s = share_row_maxima(*m, plans->ranks[0], mine, *plan, *(*comms)[0], 300ms);
    const auto took = std::chrono::steady_clock::now() - started;
    REQUIRE_FALSE(s.ok());
    const std::string why = s.error().to_string();
    CHECK_MESSAGE((why.find("rank 1") != std::string::npos || why.find("rank(s) 1") != std::string::npos), why);
    CHECK_MESSAGE(s.error().to_string().find("rows' maxima") != std::string::npos, s.error().to_string());
    if (!silent) CHECK_MESSAGE(s.error().to_string().find("its disk went away") != std::string::npos, s.error().to_string());
    CHECK(took < 10s);
    CHECK(mine.row_maxima.empty());
    // Without the maxima, place_rank derives the rest and says why it skips the row-parallel quant_int8.
    auto gpu = open_backend("cpu");
    REQUIRE(gpu.ok());
    auto placed = place_rank(**gpu, *m, plans->ranks[0], mine, *plan);
    REQUIRE_MESSAGE(placed.ok(), placed.error().to_string());
    bool said = false;
    for (const std::string& why : placed->skipped) said = said || why.find("not shared (share_row_maxima)") != std::string::npos;
    CHECK(said);
    REQUIRE(placed->release().ok());
  }
}

TEST_CASE("quant_int8_given_max: launches that differ only in their maxima never share a memo entry") {
  DerivationLaunch a;
  a.kind = Derivation::quant_int8_given_max;
  a.src_type = DataType::float32;
  a.rows = 4;
  a.cols = 8;
  a.src = 0x10000;
  a.scales = 0x20000;
  DerivationLaunch b = a;
  b.scales = 0x30000;
  CHECK_FALSE(DerivationKey::of(a) == DerivationKey::of(b));
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  DerivedWeights memo;
  auto first = (*gpu)->allocate(32), second = (*gpu)->allocate(16);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  auto in = memo.insert_pair(Derivation::quant_int8_given_max, DerivationKey::of(a),
                             DerivedPair{DerivedPtr{*first, 32}, DerivedPtr{*second, 16}});
  REQUIRE_MESSAGE(in.ok(), in.error().to_string());
  auto hit = memo.get_pair(Derivation::quant_int8_given_max, DerivationKey::of(a));
  REQUIRE(hit.ok());
  CHECK(hit->has_value());
  auto miss = memo.get_pair(Derivation::quant_int8_given_max, DerivationKey::of(b));
  REQUIRE(miss.ok());
  CHECK_FALSE(miss->has_value());
  // Nor is it quant_int8 of the same source.
  DerivationLaunch plain = a;
  plain.kind = Derivation::quant_int8;
  plain.scales = 0;
  auto other = memo.get_pair(Derivation::quant_int8, DerivationKey::of(plain));
  REQUIRE(other.ok());
  CHECK_FALSE(other->has_value());
  CHECK(memo.release(**gpu).status.ok());
}

namespace {

// A rank's communicator that rewrites the derivation count in the header
// of every maxima message it sends, keeping the rows' total: a peer that
// planned other derivations with as many rows.
class MiscountingComm final : public Communicator {
 public:
  explicit MiscountingComm(Communicator& inner) : inner_(inner) {}
  bool armed = false;  // set once the load is done: only the maxima round is rewritten
  std::uint32_t rank() const noexcept override { return inner_.rank(); }
  std::uint32_t world() const noexcept override { return inner_.world(); }
  std::string name() const override { return inner_.name(); }
  Status send(std::uint32_t to, std::vector<std::byte> bytes) override { return inner_.send(to, std::move(bytes)); }
  Result<std::optional<CommMessage>> receive(std::chrono::steady_clock::time_point deadline) override {
    return inner_.receive(deadline);
  }
  Status barrier(std::chrono::steady_clock::time_point deadline) override { return inner_.barrier(deadline); }
  void fail(const Status& why) noexcept override { inner_.fail(why); }
  bool any_source() const noexcept override { return inner_.any_source(); }
  Result<std::vector<std::vector<std::byte>>> exchange(std::vector<std::vector<std::byte>> to,
                                                       std::chrono::steady_clock::time_point deadline) override {
    for (auto& b : to) {
      if (!armed || b.size() < 24) continue;
      std::uint64_t derivations;  // the header: magic, derivations, rows (three u64)
      std::memcpy(&derivations, b.data() + 8, 8);
      derivations += 1;
      std::memcpy(b.data() + 8, &derivations, 8);
    }
    return inner_.exchange(std::move(to), deadline);
  }

 private:
  Communicator& inner_;
};

}  // namespace

TEST_CASE("share_row_maxima: a peer's maxima of another derivation count are refused, even with as many rows") {
  ScratchDir dir("dist-row-maxima-miscount");
  auto m = llm_onnx().write(dir);
  REQUIRE(m.ok());
  auto plan = plan_derivations(*m);
  REQUIRE(plan.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  auto load = plan_cooperative_load(*m, *plans);
  REQUIRE(load.ok());
  auto comms = make_local_communicators(2);
  REQUIRE(comms.ok());
  MiscountingComm miscounting(*(*comms)[1]);
  std::vector<std::optional<Result<RankShards>>> loaded(2);
  std::vector<Status> shared(2);
  {
    std::vector<std::thread> threads;
    for (std::uint32_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        Communicator& c = r == 1 ? static_cast<Communicator&>(miscounting) : *(*comms)[r];
        loaded[r] = cooperative_load(*m, *plans, *load, c);
        if (r == 1) miscounting.armed = true;
        if (loaded[r]->ok()) shared[r] = share_row_maxima(*m, plans->ranks[r], **loaded[r], *plan, c, 5000ms);
      });
    for (std::thread& t : threads) t.join();
  }
  for (auto& l : loaded) REQUIRE(l->ok());
  REQUIRE_FALSE(shared[0].ok());
  CHECK(shared[0].code() == ErrorCode::malformed);
  CHECK_MESSAGE(shared[0].to_string().find("from rank 1 are not the maxima") != std::string::npos,
                shared[0].to_string());
  CHECK((**loaded[0]).row_maxima.empty());
}

// The f32 path of the maxima: a row-parallel float32 weight with an
// infinity in two output channels. The single-process quant_int8 takes an
// infinity as the row's maximum (a NaN it leaves out); the ranks' shared
// maxima must do the same, so their scales are the single-process ones.
TEST_CASE("share_row_maxima: an f32 row-parallel weight with infinities gets the single-process scales") {
  ScratchDir dir("dist-row-maxima-f32-inf");
  OnnxWriter w;
  w.add("embed_tokens.weight", kFloat, {16, 8}, 16 * 8 * 4);
  w.nodes.push_back(onnx_proto::named_node("embed", "Gather", {"embed_tokens.weight", "ids"}, {"x"}));
  const std::string name = "layers.0.attn.o_proj.weight";
  w.add(name, kFloat, {8, 8}, 8 * 8 * 4);  // MatMul B [K=8, N=8], split on K
  w.nodes.push_back(onnx_proto::named_node("layers.0.attn.o_proj", "MatMul", {"x", name}, {"o_out"}));
  std::vector<float> b(64);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = (static_cast<float>(i % 7) - 3.0f) * 0.25f;
  b[2 * 8 + 5] = std::numeric_limits<float>::infinity();   // k 2, channel 5
  b[6 * 8 + 1] = -std::numeric_limits<float>::infinity();  // k 6, channel 1
  std::memcpy(w.blob.data() + (w.blob.size() - 256), b.data(), 256);
  auto m = w.write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_derivations(*m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  std::size_t quant = plan->size();
  for (std::size_t i = 0; i < plan->size(); ++i)
    if ((*plan)[i].weight == name && (*plan)[i].kind() == Derivation::quant_int8) quant = i;
  REQUIRE(quant < plan->size());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const auto [codes, scales] = single(**gpu, *m, *plan, quant);
  REQUIRE(scales.size() == 4 * 8);
  float s5, s1;
  std::memcpy(&s5, scales.data() + 4 * 5, 4);
  std::memcpy(&s1, scales.data() + 4 * 1, 4);
  CHECK(std::isinf(s5));  // the infinity is the maximum, as the kernel takes it
  CHECK(std::isinf(s1));

  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE_MESSAGE(plans.ok(), plans.error().to_string());
  auto load = plan_cooperative_load(*m, *plans);
  REQUIRE(load.ok());
  std::vector<RankShards> shards = load_all(*m, *plans, *load, *plan);
  for (std::uint32_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    auto placed = place_rank(**gpu, *m, plans->ranks[r], shards[r], *plan);
    REQUIRE_MESSAGE(placed.ok(), placed.error().to_string());
    bool found = false;
    for (const RankDerivedValue& v : placed->derived) {
      if (v.planned != quant) continue;
      found = true;
      CHECK(v.launch.kind == Derivation::quant_int8_given_max);
      CHECK(read_back(**gpu, v.launch.dst2, v.second_bytes) == scales);
    }
    CHECK(found);
    REQUIRE(placed->release().ok());
  }
}
