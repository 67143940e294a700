// One background thread that runs prefetch jobs in the order queued, so an
// engine's prefetch() returns at once and the copies overlap its compute.
// Started on the first job; stopped (queued jobs dropped) by stop().
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ballast::residency {

class Prefetcher {
 public:
  Prefetcher() = default;
  ~Prefetcher() { stop(); }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  void post(std::function<void()> job);
  // Returns once every job posted before the call has run.
  void wait_idle();
  // Drops what is queued, waits for the running job, joins the thread.
  void stop() noexcept;

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  bool running_job_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ballast::residency
