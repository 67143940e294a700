// A communicator that throws (an engine's own transport, written in C++
// with exceptions) on one rank: that rank's cooperative_load returns an
// error, not the exception, and announces it, so the other ranks fail at
// once naming it instead of waiting out their timeout.
#include "unit/shard/models.hpp"

#include <ballast/cooperative_load.hpp>

#include <chrono>
#include <stdexcept>
#include <thread>

using namespace ballast;
using namespace ballast::testing;
using namespace std::chrono_literals;

namespace {

// A local rank whose send throws.
class ThrowingSend final : public Communicator {
 public:
  explicit ThrowingSend(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  std::uint32_t rank() const noexcept override { return inner_->rank(); }
  std::uint32_t world() const noexcept override { return inner_->world(); }
  std::string name() const override { return "throwing"; }
  Status send(std::uint32_t, std::vector<std::byte>) override { throw std::runtime_error("the transport broke"); }
  Result<std::optional<CommMessage>> receive(std::chrono::steady_clock::time_point d) override {
    return inner_->receive(d);
  }
  Status barrier(std::chrono::steady_clock::time_point d) override { return inner_->barrier(d); }
  void fail(const Status& why) noexcept override { inner_->fail(why); }

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace

TEST_CASE("cooperative load: a communicator that throws on one rank fails every rank at once, naming it") {
  ScratchDir dir("dist-throws");
  auto m = llm_onnx().write(dir);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  auto load = plan_cooperative_load(*m, *plans);
  REQUIRE(load.ok());
  auto comms = make_local_communicators(2);
  REQUIRE(comms.ok());
  std::unique_ptr<Communicator> thrower = std::make_unique<ThrowingSend>(std::move((*comms)[1]));
  std::vector<Communicator*> ranks = {(*comms)[0].get(), thrower.get()};
  std::vector<std::optional<Result<RankShards>>> got(2);
  std::vector<bool> threw(2, false);
  CooperativeLoadOptions o;
  o.timeout = 20s;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        got[r] = cooperative_load(*m, *plans, *load, *ranks[r], o);
      } catch (...) {
        threw[r] = true;
        got[r] = make_error(ErrorCode::internal, "threw");
      }
    });
  for (std::thread& t : threads) t.join();
  CHECK(std::chrono::steady_clock::now() - start < 10s);  // told, not timed out
  CHECK_FALSE(threw[1]);
  REQUIRE_FALSE(got[1]->ok());
  CHECK_MESSAGE(got[1]->error().to_string().find("the transport broke") != std::string::npos,
                got[1]->error().to_string());
  REQUIRE_FALSE(got[0]->ok());
  CHECK(got[0]->error().code == ErrorCode::unavailable);
  CHECK_MESSAGE(got[0]->error().to_string().find("rank 1 failed") != std::string::npos, got[0]->error().to_string());
}
