// make_local_communicators: ranks as threads of one process. One shared
// state under one mutex: a mailbox per rank, the barrier, and the first
// failure announced (communicator.hpp).
#include <ballast/communicator.hpp>

#include <condition_variable>
#include <deque>
#include <mutex>

namespace ballast {

namespace {

struct World {
  explicit World(std::uint32_t size) : mailboxes(size) {}
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::deque<CommMessage>> mailboxes;
  // The barrier: ranks arrived in the current generation.
  std::uint64_t generation = 0;
  std::vector<bool> arrived;
  std::uint32_t arrivals = 0;
  // The first failure announced: every wait ends with it.
  bool failed = false;
  std::uint32_t failed_rank = 0;
  Status failure;

  Status failure_error(std::uint32_t observer) const {
    std::string message = "rank " + std::to_string(failed_rank) + " failed";
    if (!failure.ok()) message += ": " + failure.to_string();
    Status s = make_error(ErrorCode::unavailable, std::move(message));
    return observer == failed_rank ? s : std::move(s).with_context("rank " + std::to_string(observer) + " waiting");
  }
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<World> world, std::uint32_t rank) : world_(std::move(world)), rank_(rank) {}

  std::uint32_t rank() const noexcept override { return rank_; }
  std::uint32_t world() const noexcept override { return static_cast<std::uint32_t>(world_->mailboxes.size()); }
  std::string name() const override { return "local"; }

  Status send(std::uint32_t to, std::vector<std::byte> bytes) override {
    if (to >= world() || to == rank_)
      return make_error(ErrorCode::invalid_argument, "rank " + std::to_string(rank_) + " cannot send to rank " +
                                                         std::to_string(to) + " (world " + std::to_string(world()) + ")");
    std::lock_guard lock(world_->mutex);
    if (world_->failed) return world_->failure_error(rank_);
    world_->mailboxes[to].push_back({rank_, std::move(bytes)});
    world_->changed.notify_all();
    return {};
  }

  Result<std::optional<CommMessage>> receive(std::chrono::steady_clock::time_point deadline) override {
    std::unique_lock lock(world_->mutex);
    auto& box = world_->mailboxes[rank_];
    world_->changed.wait_until(lock, deadline, [&] { return world_->failed || !box.empty(); });
    if (world_->failed) return world_->failure_error(rank_);
    if (box.empty()) return std::optional<CommMessage>();
    CommMessage m = std::move(box.front());
    box.pop_front();
    return std::optional<CommMessage>(std::move(m));
  }

  Status barrier(std::chrono::steady_clock::time_point deadline) override {
    std::unique_lock lock(world_->mutex);
    World& w = *world_;
    if (w.failed) return w.failure_error(rank_);
    if (w.arrived.empty()) w.arrived.assign(world(), false);
    const std::uint64_t generation = w.generation;
    w.arrived[rank_] = true;
    if (++w.arrivals == world()) {
      w.arrivals = 0;
      w.arrived.assign(world(), false);
      ++w.generation;
      w.changed.notify_all();
      return {};
    }
    w.changed.wait_until(lock, deadline, [&] { return w.failed || w.generation != generation; });
    if (w.generation != generation) return {};
    if (w.failed) return w.failure_error(rank_);
    std::string missing;
    for (std::uint32_t r = 0; r < world(); ++r)
      if (!w.arrived[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    // This rank leaves the barrier: a later one starts it afresh.
    w.arrived[rank_] = false;
    --w.arrivals;
    return make_error(ErrorCode::unavailable, "rank " + std::to_string(rank_) + ": rank(s) " + missing +
                                                  " did not reach the barrier in time");
  }

  void fail(const Status& why) noexcept override {
    try {
      std::lock_guard lock(world_->mutex);
      if (world_->failed) return;
      world_->failed = true;
      world_->failed_rank = rank_;
      world_->failure = why;
      world_->changed.notify_all();
    } catch (...) {
      // Copying the status failed (no memory): announce without it.
      std::lock_guard lock(world_->mutex);
      world_->failed = true;
      world_->failed_rank = rank_;
      world_->changed.notify_all();
    }
  }

 private:
  std::shared_ptr<World> world_;
  std::uint32_t rank_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_local_communicators(std::uint32_t world) {
  if (world == 0 || world > 4096)
    return make_error(ErrorCode::invalid_argument,
                      "a local world of " + std::to_string(world) + " ranks: it takes 1 to 4096");
  auto shared = std::make_shared<World>(world);
  std::vector<std::unique_ptr<Communicator>> ranks;
  ranks.reserve(world);
  for (std::uint32_t r = 0; r < world; ++r) ranks.push_back(std::make_unique<LocalCommunicator>(shared, r));
  return ranks;
}

}  // namespace ballast
