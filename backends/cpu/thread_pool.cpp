#include "thread_pool.hpp"

#include <algorithm>

namespace ballast::cpu {

ThreadPool::ThreadPool(unsigned threads) {
  const unsigned workers = threads > 1 ? threads - 1 : 0;
  workers_.reserve(workers);
  for (unsigned i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks(std::unique_lock<std::mutex>& lock) {
  while (job_.body != nullptr && job_.next < job_.chunks) {
    const std::uint64_t chunk = job_.next++;
    const std::uint64_t begin = job_.count * chunk / job_.chunks;
    const std::uint64_t end = job_.count * (chunk + 1) / job_.chunks;
    const auto* body = job_.body;
    lock.unlock();
    if (begin < end) (*body)(begin, end);
    lock.lock();
    if (++job_.finished == job_.chunks) work_done_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::uint64_t seen = generation_;
  for (;;) {
    work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
    if (stopping_) return;
    seen = generation_;
    run_chunks(lock);
  }
}

void ThreadPool::parallel_for(std::uint64_t count, const std::function<void(std::uint64_t, std::uint64_t)>& body,
                              std::uint64_t chunks) {
  if (count == 0) return;
  if (chunks == 0) chunks = threads();
  chunks = std::min(chunks, count);
  if (workers_.empty() || chunks == 1) {
    body(0, count);
    return;
  }
  std::lock_guard<std::mutex> one_job(submit_);
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = Job{&body, count, chunks, 0, 0};
  ++generation_;
  work_ready_.notify_all();
  run_chunks(lock);
  work_done_.wait(lock, [&] { return job_.finished == job_.chunks; });
  job_.body = nullptr;
}

}  // namespace ballast::cpu
