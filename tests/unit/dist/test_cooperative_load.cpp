// cooperative_load with ranks as threads (make_local_communicators): on
// each format and world size every rank ends with exactly its shards'
// bytes (checked against a gather from the model's own mapping), the
// ranks read the union once between them, and what each sent and
// received is what the plan said; a failure on one rank fails every rank,
// naming it, and a rank that never comes is a timeout naming it, not a hang.
// Each load runs twice: trading bytes as messages and in rounds
// (Communicator::exchange), and a communicator with rounds only (as NCCL's)
// is given rounds on its own.
#include "unit/shard/models.hpp"

#include <ballast/cooperative_load.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include <unistd.h>

using namespace ballast;
using namespace ballast::testing;
using namespace std::chrono_literals;

namespace {

struct Run {
  std::vector<Result<RankShards>> results;
  std::vector<double> rank_seconds;  // when each rank's load returned
  double seconds = 0;
};

// Every rank of `world` on its own thread; `options_of(rank)` may differ per rank.
Run run_world(const Model& m, const ShardPlans& plans, const CooperativeLoadPlan& load,
              const std::function<CooperativeLoadOptions(std::uint32_t)>& options_of,
              std::uint32_t absent = UINT32_MAX) {
  auto comms = make_local_communicators(static_cast<std::uint32_t>(plans.ranks.size()));
  REQUIRE(comms.ok());
  Run run;
  for (std::size_t r = 0; r < plans.ranks.size(); ++r) run.results.emplace_back(make_error(ErrorCode::internal, "did not run"));
  run.rank_seconds.assign(plans.ranks.size(), 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < plans.ranks.size(); ++r) {
    if (r == absent) continue;
    threads.emplace_back([&, r] {
      run.results[r] = cooperative_load(m, plans, load, *(*comms)[r], options_of(r));
      run.rank_seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  }
  for (std::thread& t : threads) t.join();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

CooperativeLoadOptions small_chunks(std::uint32_t) {
  CooperativeLoadOptions o;
  o.read.chunk_bytes = 48;  // chunks, and so messages, cut through weights and rows
  o.read.staging_buffers = 3;
  o.read.engine = ReadEngine::threads;
  o.timeout = 20s;
  return o;
}

void check_mode(const Model& m, std::uint32_t world, const ShardPlans& plans, const CooperativeLoadPlan& load,
                ExchangeMode mode);

void check_load(const Model& m, std::uint32_t world, std::vector<ShardRule> rules = {}, std::uint32_t per = 0) {
  CAPTURE(world);
  CAPTURE(per);
  auto plans = plan_shards_all(m, ShardSpec{world, 0, std::move(rules)});
  REQUIRE_MESSAGE(plans.ok(), plans.error().to_string());
  auto load = plan_cooperative_load(m, *plans, per);
  REQUIRE_MESSAGE(load.ok(), load.error().to_string());
  // The union once between the ranks (once per storage domain); the baselines beside it.
  std::uint64_t read = 0;
  for (const CooperativeRankPlan& r : load->ranks) read += r.read_bytes;
  CHECK(read == load->union_bytes);
  const std::uint64_t once = ReadPlan::of(m.store()).bytes();
  if (per == 0) {
    CHECK(load->domains == 1);
    CHECK(load->union_bytes == once);
  } else {
    CHECK(load->domains == (world + per - 1) / per);
    // Each domain reads what its ranks need once: more than one union, at
    // most one per domain.
    CHECK(load->union_bytes >= once);
    CHECK(load->union_bytes <= once * load->domains);
    for (std::uint32_t r = 0; r < world; ++r) CHECK(load->ranks[r].domain == r / per);
    // A domain's bytes stay in it: each domain's ranks send what its ranks receive.
    for (std::uint32_t d = 0; d < load->domains; ++d) {
      std::uint64_t sent = 0, received = 0, read_d = 0;
      for (const CooperativeRankPlan& r : load->ranks)
        if (r.domain == d) {
          sent += r.sent_bytes;
          received += r.received_bytes;
          read_d += r.read_bytes;
        }
      CHECK(sent == received);
      CHECK(read_d <= once);
    }
  }
  CHECK(load->read_per_rank_bytes == plans->read_bytes_sum);
  CHECK(load->read_everything_bytes == plans->union_bytes * world);
  if (per != 0) {
    // Only the plan changes with domains: the load is checked the same way.
    check_mode(m, world, *plans, *load, ExchangeMode::messages);
    check_mode(m, world, *plans, *load, ExchangeMode::rounds);
    return;
  }

  // Contiguous shards of split weights are read by their holders: never sent.
  for (std::uint32_t r = 0; r < world; ++r) {
    std::uint64_t own = 0;
    for (const WeightShard& s : plans->ranks[r].weights)
      if (s.mapping && s.contiguous() && s.split != ShardSplit::replicated) own += s.device_bytes;
    CHECK(load->ranks[r].kept_bytes >= own);
    CHECK(load->ranks[r].read_bytes >= own);
  }

  check_mode(m, world, *plans, *load, ExchangeMode::messages);
  check_mode(m, world, *plans, *load, ExchangeMode::rounds);
}

void check_mode(const Model& m, std::uint32_t world, const ShardPlans& plans_, const CooperativeLoadPlan& load_,
                ExchangeMode mode) {
  const ShardPlans* plans = &plans_;
  const CooperativeLoadPlan* load = &load_;
  const bool rounds = mode == ExchangeMode::rounds;
  CAPTURE(rounds);
  const Run run = run_world(m, *plans, *load, [&](std::uint32_t r) {
    CooperativeLoadOptions o = small_chunks(r);
    o.exchange = mode;
    o.round_bytes = 100;  // a round every few chunks: many rounds, and ranks done at different rounds
    return o;
  });
  std::uint64_t sent = 0, received = 0, read_done = 0, round_count = 0;
  for (std::uint32_t r = 0; r < world; ++r) {
    CAPTURE(r);
    REQUIRE_MESSAGE(run.results[r].ok(), run.results[r].error().to_string());
    const RankShards& got = *run.results[r];
    const ShardPlan& plan = plans->ranks[r];
    REQUIRE(got.shards.size() == plan.weights.size());
    for (std::size_t i = 0; i < plan.weights.size(); ++i) {
      CAPTURE(plan.weights[i].weight);
      CHECK(got.shards[i].size() == plan.weights[i].device_bytes);
      CHECK(std::ranges::equal(got.shards[i], gather(m, plan.weights[i])));
    }
    // The report is the plan.
    const CooperativeRankPlan& want = load->ranks[r];
    CHECK(got.report.read_bytes == want.read_bytes);
    CHECK(got.report.kept_bytes == want.kept_bytes);
    CHECK(got.report.sent_bytes == want.sent_bytes);
    CHECK(got.report.received_bytes == want.received_bytes);
    CHECK(got.report.inline_bytes == want.inline_bytes);
    CHECK(want.kept_bytes + want.received_bytes + want.inline_bytes == want.shard_bytes);
    sent += got.report.sent_bytes;
    received += got.report.received_bytes;
    read_done += got.report.read_bytes;
    CHECK(got.report.rounds == rounds);
    // Every rank takes part in every round, so all count the same.
    if (r > 0) CHECK(got.report.round_count == round_count);
    round_count = got.report.round_count;
  }
  // Rounds: several where bytes cross (100-byte rounds), at least the last.
  bool traffic = false;
  for (const CooperativeRankPlan& r : load->ranks) traffic = traffic || r.sent_bytes > 0;
  if (rounds) CHECK(round_count >= (traffic ? 2u : 1u));
  else CHECK(round_count == 0);
  CHECK(sent == received);
  CHECK(read_done == load->union_bytes);
  CHECK((sent > 0) == traffic);
  if (world > 1 && load->domains < world) CHECK(traffic);
}

// The Hugging Face safetensors model of unit_shard, its shard plans for
// `world` ranks (built-in rules) and their cooperative load plan.
struct HfWorld {
  ScratchDir dir;
  Model model;
  ShardPlans plans;
  CooperativeLoadPlan load;
  HfWorld(const char* name, std::uint32_t world) : dir(name) {
    auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
    REQUIRE_MESSAGE(m.ok(), m.error().to_string());
    model = std::move(*m);
    auto p = plan_shards_all(model, ShardSpec{world, 0, {}});
    REQUIRE_MESSAGE(p.ok(), p.error().to_string());
    plans = std::move(*p);
    auto l = plan_cooperative_load(model, plans);
    REQUIRE_MESSAGE(l.ok(), l.error().to_string());
    load = std::move(*l);
  }
};

}  // namespace

TEST_CASE("cooperative load, safetensors: 1, 2 and 4 ranks each end with exactly their shards") {
  ScratchDir dir("dist-st");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  std::vector<ShardRule> rules = {{"qkv", "*.qkv_proj.weight", ShardSplit::column, {8, 4, 4}, 0}};
  for (ShardRule& r : default_shard_rules()) rules.push_back(std::move(r));
  for (std::uint32_t world : {1u, 2u, 4u}) check_load(*m, world, rules);
}

TEST_CASE("cooperative load with storage domains: each domain reads what its ranks need, bytes stay in it") {
  ScratchDir dir("dist-domains");
  auto st = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  for (std::uint32_t per : {1u, 2u, 3u}) check_load(*st, 4, {}, per);
  auto onnx = llm_onnx().write(dir);
  REQUIRE_MESSAGE(onnx.ok(), onnx.error().to_string());
  check_load(*onnx, 2, {}, 1);
  // One rank a domain reads exactly its own shards' bytes, sends nothing.
  auto plans = plan_shards_all(*st, ShardSpec{4, 0, {}});
  REQUIRE(plans.ok());
  auto alone = plan_cooperative_load(*st, *plans, 1);
  REQUIRE(alone.ok());
  for (std::uint32_t r = 0; r < 4; ++r) {
    CHECK(alone->ranks[r].sent_bytes == 0);
    CHECK(alone->ranks[r].received_bytes == 0);
    CHECK(alone->ranks[r].read_bytes >= plans->ranks[r].totals.read_bytes);
  }
  // A domain larger than the world is one domain.
  auto one = plan_cooperative_load(*st, *plans, 64);
  REQUIRE(one.ok());
  CHECK(one->domains == 1);
}

TEST_CASE("cooperative load, GGUF: block-quantized shards on whole blocks") {
  ScratchDir dir("dist-gguf");
  auto m = open_model(dir.write("m.gguf", gguf_of(gguf_llama())));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  for (std::uint32_t world : {1u, 2u}) check_load(*m, world);
}

TEST_CASE("cooperative load, ONNX: MatMulNBits operands, strided MatMul columns, an inline weight copied locally") {
  ScratchDir dir("dist-onnx");
  auto m = llm_onnx().write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  for (std::uint32_t world : {1u, 2u}) check_load(*m, world);
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  auto load = plan_cooperative_load(*m, *plans);
  REQUIRE(load.ok());
  CHECK(load->ranks[0].inline_bytes == 32);  // layers.0.norm.weight, on every rank
  CHECK(load->ranks[1].inline_bytes == 32);
}

TEST_CASE("cooperative load: a read failing on one rank fails every rank, naming it, in bounded time") {
  HfWorld w("dist-fail", 4);
  const Model* m = &w.model;
  const ShardPlans* plans = &w.plans;
  const CooperativeLoadPlan* load = &w.load;
  const Run run = run_world(*m, *plans, *load, [](std::uint32_t r) {
    CooperativeLoadOptions o = small_chunks(r);
    if (r == 2) o.read.pread = [](int, std::span<std::byte>, std::uint64_t) -> std::int64_t { return -EIO; };
    return o;
  });
  CHECK(run.seconds < 15);  // every rank told at once, not after its 20 s timeout
  for (std::uint32_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    REQUIRE_FALSE(run.results[r].ok());
    const std::string text = run.results[r].error().to_string();
    if (r == 2) {
      CHECK_MESSAGE(run.results[r].error().code == ErrorCode::io, text);
    } else {
      CHECK_MESSAGE(run.results[r].error().code == ErrorCode::unavailable, text);
      CHECK_MESSAGE(text.find("rank 2 failed") != std::string::npos, text);
    }
  }
}

TEST_CASE("cooperative load: a rank that never comes is a timeout naming it on the others") {
  HfWorld w("dist-absent", 2);
  const Model* m = &w.model;
  const ShardPlans* plans = &w.plans;
  const CooperativeLoadPlan* load = &w.load;
  REQUIRE(load->ranks[0].received_bytes > 0);
  const Run run = run_world(*m, *plans, *load, [](std::uint32_t r) {
    CooperativeLoadOptions o = small_chunks(r);
    o.timeout = 300ms;
    return o;
  }, /*absent=*/1);
  REQUIRE_FALSE(run.results[0].ok());
  const std::string text = run.results[0].error().to_string();
  CHECK_MESSAGE(run.results[0].error().code == ErrorCode::unavailable, text);
  // Rank 1 never took part in the first round, where the ranks agree on
  // how they trade.
  CHECK_MESSAGE(text.find("rank(s) 1 in") != std::string::npos, text);
  CHECK(run.seconds < 10);
}

TEST_CASE("cooperative load: a rank that stops mid-load without a word ends its peers' loads at their timeout, naming it") {
  // Rank 1 reads two chunks (sending its peers their bytes), then its
  // storage stops answering for 4 s: as good as dead, and it says nothing.
  // Its peers end after their 300 ms timeout, well before its 4 s.
  HfWorld w("dist-stops", 4);
  for (ExchangeMode mode : {ExchangeMode::messages, ExchangeMode::rounds}) {
    const bool rounds = mode == ExchangeMode::rounds;
    CAPTURE(rounds);
    auto calls = std::make_shared<std::atomic<int>>(0);
    const Run run = run_world(w.model, w.plans, w.load, [&](std::uint32_t r) {
      CooperativeLoadOptions o = small_chunks(r);
      o.exchange = mode;
      o.round_bytes = 100;
      o.timeout = 300ms;
      if (r == 1) {
        o.read.staging_buffers = 1;
        o.read.pread = [calls](int fd, std::span<std::byte> into, std::uint64_t at) -> std::int64_t {
          if (++*calls > 2) {
            std::this_thread::sleep_for(4s);
            return -EIO;
          }
          const ssize_t n = ::pread(fd, into.data(), into.size(), static_cast<off_t>(at));
          return n < 0 ? -errno : n;
        };
      }
      return o;
    });
    for (std::uint32_t r = 0; r < 4; ++r) {
      CAPTURE(r);
      REQUIRE_FALSE(run.results[r].ok());
      if (r == 1) continue;
      const std::string text = run.results[r].error().to_string();
      CHECK_MESSAGE(run.results[r].error().code == ErrorCode::unavailable, text);
      // Rounds: the round rank 1 never joined; messages: rank 1 owing this
      // rank bytes, or having paid them but not said it read everything.
      const bool named = rounds ? text.find("rank(s) 1 in") != std::string::npos
                                : text.find("rank 1 (") != std::string::npos ||
                                      text.find("rank(s) 1 still reading") != std::string::npos;
      CHECK_MESSAGE(named, text);
      CHECK(run.rank_seconds[r] < 3.0);
    }
  }
}

TEST_CASE("cooperative load: a message its plan does not take is refused, naming the sender") {
  HfWorld w("dist-bad", 2);
  const Model* m = &w.model;
  const ShardPlans* plans = &w.plans;
  const CooperativeLoadPlan* load = &w.load;
  auto comms = make_local_communicators(2);
  REQUIRE(comms.ok());
  // Rank 1 is an impostor: it greets rank 0 as a rank trading in messages
  // would (the first round, then the barrier), sends it bytes of a stretch
  // rank 0 does not need from it, then waits.
  std::thread impostor([&] {
    const std::uint64_t hello = 0x62616c6c68000000ull;
    const auto* w = reinterpret_cast<const std::byte*>(&hello);
    REQUIRE((*comms)[1]->send(0, std::vector<std::byte>(w, w + sizeof hello)).ok());
    REQUIRE((*comms)[1]->barrier(std::chrono::steady_clock::now() + 10s).ok());
    std::vector<std::byte> bogus(24 + 5);
    const std::uint64_t header[3] = {0, 0, 3};
    std::memcpy(bogus.data(), header, sizeof header);
    REQUIRE((*comms)[1]->send(0, bogus).ok());
  });
  CooperativeLoadOptions o = small_chunks(0);
  auto got = cooperative_load(*m, *plans, *load, *(*comms)[0], o);
  impostor.join();
  REQUIRE_FALSE(got.ok());
  CHECK_MESSAGE(got.error().code == ErrorCode::malformed, got.error().to_string());
  CHECK_MESSAGE(got.error().to_string().find("rank 1 sent 5 bytes") != std::string::npos, got.error().to_string());
  // And the impostor hears of it.
  auto heard = (*comms)[1]->receive(std::chrono::steady_clock::now() + 5s);
  REQUIRE_FALSE(heard.ok());
  CHECK(heard.error().to_string().find("rank 0 failed") != std::string::npos);
}

TEST_CASE("cooperative load: a message shorter than its header is refused, naming the sender") {
  HfWorld w("dist-short", 2);
  auto comms = make_local_communicators(2);
  REQUIRE(comms.ok());
  // Rank 1 greets rank 0 as a peer would, then sends 23 bytes: one short of
  // the header (mapping, offset, length), from a rank that is not rank 0.
  std::thread impostor([&] {
    const std::uint64_t hello = 0x62616c6c68000000ull;
    const auto* bytes = reinterpret_cast<const std::byte*>(&hello);
    REQUIRE((*comms)[1]->send(0, std::vector<std::byte>(bytes, bytes + sizeof hello)).ok());
    REQUIRE((*comms)[1]->barrier(std::chrono::steady_clock::now() + 10s).ok());
    REQUIRE((*comms)[1]->send(0, std::vector<std::byte>(23, std::byte{1})).ok());
  });
  auto got = cooperative_load(w.model, w.plans, w.load, *(*comms)[0], small_chunks(0));
  impostor.join();
  REQUIRE_FALSE(got.ok());
  CHECK_MESSAGE(got.error().code == ErrorCode::malformed, got.error().to_string());
  CHECK_MESSAGE(got.error().to_string().find("a message of 23 bytes from rank 1 is not a cooperative load's") !=
                    std::string::npos,
                got.error().to_string());
  (void)(*comms)[1]->receive(std::chrono::steady_clock::now() + 5s);
}

TEST_CASE("cooperative load: a load plan that leaves bytes of a shard unread fails, never passes zeros") {
  HfWorld w("dist-uncovered", 2);
  CooperativeLoadPlan broken = w.load;
  broken.reads[1] = ReadPlan{};  // rank 1 reads nothing: its part of the union is nobody's
  const Run run = run_world(w.model, w.plans, broken, small_chunks);
  for (std::uint32_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    REQUIRE_FALSE(run.results[r].ok());
    const std::string text = run.results[r].error().to_string();
    const bool named = text.find("is the load plan made from these shard plans") != std::string::npos ||
                       text.find("failed") != std::string::npos;
    CHECK_MESSAGE(named, text);
  }
}

TEST_CASE("cooperative load: plans of another world are refused before anything is read") {
  HfWorld w("dist-world", 2);
  const Model* m = &w.model;
  const ShardPlans* plans = &w.plans;
  const CooperativeLoadPlan* load = &w.load;
  auto comms = make_local_communicators(4);
  REQUIRE(comms.ok());
  auto got = cooperative_load(*m, *plans, *load, *(*comms)[0]);
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().code == ErrorCode::invalid_argument);
  // A load plan of the right world that lacks one rank's plan, or one
  // rank's reads: refused too, never read past.
  auto two = make_local_communicators(2);
  REQUIRE(two.ok());
  for (bool ranks : {true, false}) {
    CAPTURE(ranks);
    CooperativeLoadPlan short_plan = *load;
    if (ranks) short_plan.ranks.pop_back();
    else short_plan.reads.pop_back();
    auto refused = cooperative_load(*m, *plans, short_plan, *(*two)[0]);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
  }
  CHECK(make_local_communicators(0).error().code == ErrorCode::invalid_argument);
  CHECK_FALSE(plan_cooperative_load(*m, ShardPlans{}).ok());
}

// A communicator of rounds only, like NCCL's: no send or receive, its
// exchange that of the local communicator it wraps. `slow_to`: this rank's
// sends to that rank wait first (the default exchange's early buffers).
class RoundsOnly final : public Communicator {
 public:
  explicit RoundsOnly(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  std::uint32_t rank() const noexcept override { return inner_->rank(); }
  std::uint32_t world() const noexcept override { return inner_->world(); }
  std::string name() const override { return "rounds-only"; }
  Status send(std::uint32_t, std::vector<std::byte>) override { return make_error(ErrorCode::unsupported, "no send"); }
  Result<std::optional<CommMessage>> receive(std::chrono::steady_clock::time_point) override {
    return make_error(ErrorCode::unsupported, "no receive");
  }
  Status barrier(std::chrono::steady_clock::time_point deadline) override { return inner_->barrier(deadline); }
  void fail(const Status& why) noexcept override { inner_->fail(why); }
  bool any_source() const noexcept override { return false; }
  Result<std::vector<std::vector<std::byte>>> exchange(std::vector<std::vector<std::byte>> to,
                                                       std::chrono::steady_clock::time_point deadline) override {
    return inner_->exchange(std::move(to), deadline);
  }

 private:
  std::unique_ptr<Communicator> inner_;
};

// The local communicator with one rank's sends to another held back.
class Slow final : public Communicator {
 public:
  Slow(std::unique_ptr<Communicator> inner, std::uint32_t slow_to) : inner_(std::move(inner)), slow_to_(slow_to) {}
  std::uint32_t rank() const noexcept override { return inner_->rank(); }
  std::uint32_t world() const noexcept override { return inner_->world(); }
  std::string name() const override { return "slow"; }
  Status send(std::uint32_t to, std::vector<std::byte> bytes) override {
    if (to == slow_to_) std::this_thread::sleep_for(150ms);
    return inner_->send(to, std::move(bytes));
  }
  Result<std::optional<CommMessage>> receive(std::chrono::steady_clock::time_point deadline) override {
    return inner_->receive(deadline);
  }
  Status barrier(std::chrono::steady_clock::time_point deadline) override { return inner_->barrier(deadline); }
  void fail(const Status& why) noexcept override { inner_->fail(why); }

 private:
  std::unique_ptr<Communicator> inner_;
  std::uint32_t slow_to_;
};

TEST_CASE("cooperative load: a communicator of rounds only is traded with in rounds; asking it for messages is refused") {
  HfWorld w("dist-rounds-only", 4);
  auto comms = make_local_communicators(4);
  REQUIRE(comms.ok());
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (auto& c : *comms) ranks.push_back(std::make_unique<RoundsOnly>(std::move(c)));
  std::vector<Result<RankShards>> results;
  for (int r = 0; r < 4; ++r) results.emplace_back(make_error(ErrorCode::internal, "did not run"));
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < 4; ++r)
    threads.emplace_back([&, r] { results[r] = cooperative_load(w.model, w.plans, w.load, *ranks[r], small_chunks(r)); });
  for (std::thread& t : threads) t.join();
  for (std::uint32_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    REQUIRE_MESSAGE(results[r].ok(), results[r].error().to_string());
    CHECK(results[r]->report.rounds);
    CHECK(results[r]->report.received_bytes == w.load.ranks[r].received_bytes);
    for (std::size_t i = 0; i < w.plans.ranks[r].weights.size(); ++i)
      CHECK(std::ranges::equal(results[r]->shards[i], gather(w.model, w.plans.ranks[r].weights[i])));
  }
  CooperativeLoadOptions messages = small_chunks(0);
  messages.exchange = ExchangeMode::messages;
  auto refused = cooperative_load(w.model, w.plans, w.load, *ranks[0], messages);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK_MESSAGE(refused.error().to_string().find("rounds-only has no messages") != std::string::npos,
                refused.error().to_string());
}

TEST_CASE("cooperative load: ranks given different exchange modes fail, each error naming the mismatch") {
  HfWorld w("dist-mixed-modes", 2);
  REQUIRE(w.load.ranks[0].received_bytes > 0);
  REQUIRE(w.load.ranks[1].received_bytes > 0);
  for (const std::uint32_t rounds_rank : {0u, 1u}) {
    CAPTURE(rounds_rank);
    const Run run = run_world(w.model, w.plans, w.load, [&](std::uint32_t r) {
      CooperativeLoadOptions o = small_chunks(r);
      o.exchange = r == rounds_rank ? ExchangeMode::rounds : ExchangeMode::messages;
      o.timeout = 5s;
      return o;
    });
    CHECK(run.seconds < 4);  // told at once, not at the timeout
    for (std::uint32_t r = 0; r < 2; ++r) {
      CAPTURE(r);
      REQUIRE_FALSE(run.results[r].ok());
      const std::string text = run.results[r].error().to_string();
      CHECK_MESSAGE(text.find("the same exchange mode (--exchange)") != std::string::npos, text);
      CHECK_MESSAGE(text.find("do the ranks have the same model and plan") == std::string::npos, text);
    }
  }
}

TEST_CASE("cooperative load: a rank reading its own shard for longer than the timeout keeps its peers waiting, "
          "as messages and in rounds") {
  // Rank 0 reads one 1 KiB chunk at a time, 250 ms each: its part takes
  // longer than two of the peers' 1 s timeouts, and between the chunks
  // that carry their bytes it sends them nothing but a sign of life.
  HfWorld w("dist-quiet", 2);
  for (ExchangeMode mode : {ExchangeMode::messages, ExchangeMode::rounds}) {
    const bool rounds = mode == ExchangeMode::rounds;
    CAPTURE(rounds);
    const Run run = run_world(w.model, w.plans, w.load, [&](std::uint32_t r) {
      CooperativeLoadOptions o = small_chunks(r);
      o.exchange = mode;
      o.round_bytes = UINT64_MAX;  // rounds only when quiet, and at the end
      o.timeout = 1s;
      if (r == 0) {
        o.read.chunk_bytes = 1024;
        o.read.staging_buffers = 1;
        o.read.pread = [](int fd, std::span<std::byte> into, std::uint64_t at) -> std::int64_t {
          std::this_thread::sleep_for(250ms);
          const ssize_t n = ::pread(fd, into.data(), into.size(), static_cast<off_t>(at));
          return n < 0 ? -errno : n;
        };
      }
      return o;
    });
    CHECK(run.seconds > 2.0);  // longer than two timeouts
    for (std::uint32_t r = 0; r < 2; ++r) {
      CAPTURE(r);
      REQUIRE_MESSAGE(run.results[r].ok(), run.results[r].error().to_string());
      CHECK(run.results[r]->report.received_bytes == w.load.ranks[r].received_bytes);
    }
  }
}

TEST_CASE("cooperative load in rounds: a read failing on one rank fails every rank, naming it, in bounded time") {
  HfWorld w("dist-rounds-fail", 4);
  const Run run = run_world(w.model, w.plans, w.load, [](std::uint32_t r) {
    CooperativeLoadOptions o = small_chunks(r);
    o.exchange = ExchangeMode::rounds;
    o.round_bytes = 100;
    if (r == 2) o.read.pread = [](int, std::span<std::byte>, std::uint64_t) -> std::int64_t { return -EIO; };
    return o;
  });
  CHECK(run.seconds < 15);
  for (std::uint32_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    REQUIRE_FALSE(run.results[r].ok());
    const std::string text = run.results[r].error().to_string();
    if (r != 2) CHECK_MESSAGE(text.find("rank 2 failed") != std::string::npos, text);
  }
}

TEST_CASE("exchange over messages: every rank gets each peer's buffer of each round, a round that came early kept") {
  // Rank 0's buffers for rank 2 go late, so rank 1 finishes each round
  // before rank 2 and sends rank 2 its next round's buffer early.
  auto comms = make_local_communicators(3);
  REQUIRE(comms.ok());
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (std::uint32_t r = 0; r < 3; ++r)
    ranks.push_back(std::make_unique<Slow>(std::move((*comms)[r]), r == 0 ? 2u : UINT32_MAX));
  constexpr int kRounds = 4;
  std::vector<std::vector<std::vector<std::vector<std::byte>>>> got(3);  // [rank][round][from]
  std::vector<Status> status(3);
  auto buffer = [](std::uint32_t from, std::uint32_t to, int round) {
    // Sizes differ by sender, receiver and round (0 bytes included).
    std::vector<std::byte> b((from * 7 + to * 3 + static_cast<std::uint32_t>(round)) % 5);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::byte(from * 64 + to * 16 + static_cast<std::uint32_t>(round) * 4 + i);
    return b;
  };
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      for (int k = 0; k < kRounds; ++k) {
        std::vector<std::vector<std::byte>> to;
        for (std::uint32_t q = 0; q < 3; ++q) to.push_back(buffer(r, q, k));
        auto from = ranks[r]->exchange(std::move(to), std::chrono::steady_clock::now() + 10s);
        if (!from.ok()) {
          status[r] = from.status();
          return;
        }
        got[r].push_back(std::move(*from));
      }
    });
  for (std::thread& t : threads) t.join();
  for (std::uint32_t r = 0; r < 3; ++r) {
    CAPTURE(r);
    REQUIRE_MESSAGE(status[r].ok(), status[r].to_string());
    REQUIRE(got[r].size() == kRounds);
    for (int k = 0; k < kRounds; ++k)
      for (std::uint32_t p = 0; p < 3; ++p) CHECK(got[r][static_cast<std::size_t>(k)][p] == buffer(p, r, k));
  }
  // A round of the wrong size is refused; a lone rank's round times out naming the others.
  CHECK(ranks[0]->exchange({}, std::chrono::steady_clock::now() + 10ms).error().code == ErrorCode::invalid_argument);
  auto alone = make_local_communicators(2);
  auto lonely = (*alone)[0]->exchange(std::vector<std::vector<std::byte>>(2), std::chrono::steady_clock::now() + 50ms);
  REQUIRE_FALSE(lonely.ok());
  CHECK_MESSAGE(lonely.error().to_string().find("from rank(s) 1") != std::string::npos, lonely.error().to_string());
}

TEST_CASE("local communicator: a failure ends a peer's pending receive and barrier at once, naming the rank") {
  auto comms = make_local_communicators(3);
  REQUIRE(comms.ok());
  const auto start = std::chrono::steady_clock::now();
  Result<std::optional<CommMessage>> received = std::optional<CommMessage>();
  Status barrier;
  std::thread waiting([&] { received = (*comms)[0]->receive(std::chrono::steady_clock::now() + 30s); });
  std::thread gathered([&] { barrier = (*comms)[2]->barrier(std::chrono::steady_clock::now() + 30s); });
  std::this_thread::sleep_for(100ms);  // both are waiting now, with nothing coming
  (*comms)[1]->fail(make_error(ErrorCode::io, "disk gone"));
  waiting.join();
  gathered.join();
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  REQUIRE_FALSE(received.ok());
  CHECK(received.error().code == ErrorCode::unavailable);
  CHECK_MESSAGE(received.error().to_string().find("rank 1 failed: io: disk gone") != std::string::npos,
                received.error().to_string());
  REQUIRE_FALSE(barrier.ok());
  CHECK(barrier.to_string().find("rank 1 failed") != std::string::npos);
  // Later calls say the same; sending is refused too.
  CHECK_FALSE((*comms)[0]->send(2, std::vector<std::byte>(4)).ok());
}

TEST_CASE("local communicator: messages between two ranks keep their order; a barrier waits for every rank") {
  auto comms = make_local_communicators(2);
  REQUIRE(comms.ok());
  for (std::uint8_t i = 0; i < 50; ++i) REQUIRE((*comms)[1]->send(0, std::vector<std::byte>(1, std::byte{i})).ok());
  for (std::uint8_t i = 0; i < 50; ++i) {
    auto m = (*comms)[0]->receive(std::chrono::steady_clock::now() + 1s);
    REQUIRE(m.ok());
    REQUIRE(m->has_value());
    CHECK((*m)->from == 1);
    CHECK((*m)->bytes == std::vector<std::byte>(1, std::byte{i}));
  }
  auto none = (*comms)[0]->receive(std::chrono::steady_clock::now() + 10ms);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  // Alone at the barrier: a timeout naming the rank that did not come.
  const Status alone = (*comms)[0]->barrier(std::chrono::steady_clock::now() + 50ms);
  REQUIRE_FALSE(alone.ok());
  CHECK_MESSAGE(alone.to_string().find("rank(s) 1 did not reach the barrier") != std::string::npos, alone.to_string());
  // Both: through, twice (the barrier starts afresh).
  for (int round = 0; round < 2; ++round) {
    Status other;
    std::thread t([&] { other = (*comms)[1]->barrier(std::chrono::steady_clock::now() + 10s); });
    CHECK((*comms)[0]->barrier(std::chrono::steady_clock::now() + 10s).ok());
    t.join();
    CHECK(other.ok());
  }
  CHECK_FALSE((*comms)[0]->send(0, {}).ok());  // not to itself
  CHECK_FALSE((*comms)[0]->send(2, {}).ok());  // not outside the world
}
