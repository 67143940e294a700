// The threads engine: `threads` workers, each taking the next request off
// a queue and calling pread until the request is done. The portable way,
// and the only one that can route reads through an injected PreadFunction.
#include "read/issuer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace ballast::read {

namespace {

class ThreadIssuer final : public Issuer {
 public:
  ThreadIssuer(std::uint32_t threads, PreadFunction pread) : pread_(std::move(pread)) {
    workers_.reserve(threads);
    // As many as the system gives: fewer only read slower, and leaving the
    // constructor by an exception with threads started would destroy them
    // joinable (the end of the process). None started: rethrown, the
    // reader's out_of_memory.
    try {
      for (std::uint32_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::exception&) {  // std::system_error, or bad_alloc for a thread's state
      if (workers_.empty()) throw;
    }
  }

  // Every queued request is still read (the reader drains what it started
  // before it frees a buffer; nothing may write into one after that).
  ~ThreadIssuer() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    more_work_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  Status start(const ReadRequest& request) override {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(request);
    }
    more_work_.notify_one();
    return Status();
  }

  ReadDone wait() override {
    std::unique_lock lock(mutex_);
    finished_cv_.wait(lock, [&] { return !finished_.empty(); });
    ReadDone done = finished_.front();
    finished_.pop_front();
    return done;
  }

 private:
  void work() {
    for (;;) {
      ReadRequest request;
      {
        std::unique_lock lock(mutex_);
        more_work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left to read
        request = queue_.front();
        queue_.pop_front();
      }
      const ReadDone done = read(request);
      {
        std::lock_guard lock(mutex_);
        finished_.push_back(done);
      }
      finished_cv_.notify_one();
    }
  }

  // One request, short reads continued. An injected function that throws
  // is an EIO: the exception cannot cross into the reader's thread.
  ReadDone read(const ReadRequest& r) const {
    ReadDone done{r.tag, 0, 0};
    while (done.got < r.need) {
      const std::uint64_t ask = std::min<std::uint64_t>(r.dst.size() - done.got, kMaxSingleRead);
      const std::span<std::byte> dst = r.dst.subspan(done.got, ask);
      std::int64_t n;
      if (pread_) {
        try {
          n = pread_(r.fd, dst, r.offset + done.got);
        } catch (...) {
          n = -EIO;
        }
      } else {
        const ssize_t got = ::pread(r.fd, dst.data(), dst.size(), static_cast<off_t>(r.offset + done.got));
        n = got < 0 ? -static_cast<std::int64_t>(errno) : got;
      }
      if (n == -EINTR || n == -EAGAIN) continue;
      if (n < 0) {
        done.error = static_cast<int>(-n);
        break;
      }
      if (n == 0) break;  // the file ended
      if (static_cast<std::uint64_t>(n) > ask) {  // a broken read function: never trust it past the buffer
        done.error = EIO;
        break;
      }
      done.got += static_cast<std::uint64_t>(n);
    }
    return done;
  }

  PreadFunction pread_;
  std::mutex mutex_;
  std::condition_variable more_work_;
  std::condition_variable finished_cv_;
  std::deque<ReadRequest> queue_;
  std::deque<ReadDone> finished_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // last: started after, joined before, the rest
};

}  // namespace

std::unique_ptr<Issuer> make_thread_issuer(std::uint32_t threads, std::uint32_t /*tags*/, PreadFunction pread) {
  return std::make_unique<ThreadIssuer>(threads, std::move(pread));
}

}  // namespace ballast::read
