// Gate: a residency handle's reader-writer lock. Every use shares it;
// ballast_residency_release takes it alone (the C++ object's rule: release
// must not overlap other use).
//
// Not a std::shared_mutex, whose answer to "may a reader pass a waiting
// writer?" is the platform's: glibc's default lets readers pass (so a
// stream of uses can hold a release off for ever), others stop them (so a
// release waiting behind a pin_group that waits for room also stops the
// unpins that would make that room, and the pin_group waits out its whole
// wait_ms). Here the rule is ours on every platform:
// - a use (lock_shared) waits while a release waits or runs: a release is
//   never starved;
// - an unpin, and a read of a pin already held (ballast_pin_value,
//   ballast_pin_read), take lock_shared_passing: they wait only while a
//   release runs. They start no new work, and a use already inside (a
//   pin_group waiting for room) may be waiting for exactly that pin's
//   holder to read it and let it go.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace ballast::capi {

class Gate {
 public:
  void lock_shared() {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return writers_waiting_ == 0 && !writer_; });
    ++readers_;
  }
  void lock_shared_passing() {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return !writer_; });
    ++readers_;
  }
  void unlock_shared() {
    std::lock_guard l(m_);
    if (--readers_ == 0) cv_.notify_all();
  }
  void lock() {
    std::unique_lock l(m_);
    ++writers_waiting_;
    cv_.wait(l, [&] { return readers_ == 0 && !writer_; });
    --writers_waiting_;
    writer_ = true;
  }
  void unlock() {
    std::lock_guard l(m_);
    writer_ = false;
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::size_t readers_ = 0, writers_waiting_ = 0;
  bool writer_ = false;
};

// std::shared_lock's shape for the passing kind (an unpin's share).
class PassingLock {
 public:
  explicit PassingLock(Gate& g) : g_(g) { g_.lock_shared_passing(); }
  ~PassingLock() { g_.unlock_shared(); }
  PassingLock(const PassingLock&) = delete;
  PassingLock& operator=(const PassingLock&) = delete;

 private:
  Gate& g_;
};

}  // namespace ballast::capi
