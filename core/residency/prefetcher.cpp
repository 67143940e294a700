#include "residency/prefetcher.hpp"

#include <ballast/log.hpp>

#include <exception>
#include <utility>

namespace ballast::residency {

void Prefetcher::post(std::function<void()> job) {
  std::lock_guard lock(mutex_);
  if (stopping_) return;
  // The worker first: a thread the system refuses then leaves no job queued
  // that no one would run (wait_idle() would wait for it for good).
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  queue_.push_back(std::move(job));
  changed_.notify_all();
}

void Prefetcher::wait_idle() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return (queue_.empty() && !running_job_) || stopping_; });
}

void Prefetcher::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    queue_.clear();
    changed_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Prefetcher::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    running_job_ = true;
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {  // a prefetch is best effort: it never takes the engine down
      log_message(LogLevel::warning, "residency", std::string("prefetch failed: ") + e.what());
    } catch (...) {
      log_message(LogLevel::warning, "residency", "prefetch failed with an unknown exception");
    }
    lock.lock();
    running_job_ = false;
    changed_.notify_all();
  }
}

}  // namespace ballast::residency
