// A small persistent pool: the CPU kernels split each launch into chunks
// that the pool's workers and the calling thread take in turn. One job runs
// at a time; callers from several threads queue on a mutex.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ballast::cpu {

class ThreadPool {
 public:
  // `threads` counts the caller too: 1 means no workers at all.
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls body(begin, end) over [0, count) split into at most `chunks`
  // contiguous pieces (0: one per thread); returns when all are done.
  // `body` must not throw.
  void parallel_for(std::uint64_t count, const std::function<void(std::uint64_t, std::uint64_t)>& body,
                    std::uint64_t chunks = 0);

 private:
  struct Job {
    const std::function<void(std::uint64_t, std::uint64_t)>* body = nullptr;
    std::uint64_t count = 0;
    std::uint64_t chunks = 0;
    std::uint64_t next = 0;      // next chunk to hand out
    std::uint64_t finished = 0;  // chunks done
  };

  void worker_loop();
  // Takes and runs chunks of the current job until none is left; `lock` is
  // held on entry and exit, released while a chunk runs.
  void run_chunks(std::unique_lock<std::mutex>& lock);

  std::mutex submit_;  // one job at a time
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  Job job_;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace ballast::cpu
