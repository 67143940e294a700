// Copies out of a file mapping that survive the file being truncated.
//
// A read of a mapped page past the end of a truncated file raises SIGBUS.
// guarded_copy() catches exactly that: a process-wide SIGBUS handler,
// installed on first use and chaining to whatever handler was there before,
// siglongjmps back into guarded_copy() only when the faulting thread is
// inside a guarded copy AND the fault address lies in the source range that
// copy guards. Any other SIGBUS (another thread, another address, the
// destination, a kill(2)) goes to the previous handler, or, where there was
// none, kills the process exactly as it would have without ballast.
//
// ZeroFillRange is the second mode, for reads ballast does not run itself
// (a backend's copy_to_device handed a span of the mapping): it never
// jumps. While a range is armed, a SIGBUS for a vanished page in it
// (BUS_ADRERR), raised by any thread, is answered by mapping an anonymous
// zero page, read-only, over the faulting page and marking every armed
// range that shares that page as faulted; the handler returns and the
// faulting instruction reads zeros. Everything else chains as above.
//
// A range may name a poison flag (its MappedFile's): the handler sets it
// with the faulted bit, so the file stays refused after the range is
// disarmed, even if the file is later put back as it was (docs/reliability.md).
//
// RegistrationArm is the third, for reads nobody runs through ballast at
// all: a backend's kernels or a driver thread reading a zero-copy
// registration of the mapping, at any time while it is registered. Same
// zero-fill answer, in a second, larger table whose slots never wait.
//
// Chaining is exact: a SIGBUS that is not ballast's reaches the
// disposition installed before ballast's as if ballast were not loaded:
// SIG_IGN ignores a sent signal (a fault cannot be ignored: the kernel
// forces the default, so the process dies of it), a handler runs with its
// own sa_mask (and SIGBUS unblocked under SA_NODEFER), and SA_RESETHAND
// makes it run once, the default taking over after.
// docs/reliability.md has the reasoning.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ballast::store {

// memcpy(dst, src, n), except that a SIGBUS from reading [src, src + n)
// ends the copy and returns false (dst then holds a partial copy). Only
// memcpy runs under the guard: nothing that holds a lock is ever jumped out
// of. Thread-safe; async-signal-safe state only.
bool guarded_copy(void* dst, const void* src, std::size_t n) noexcept;

// Arms [src, src + n) for zero-filling (see above) until destroyed, when
// it is disarmed. Armed ranges live in a fixed table of kSlots slots
// (async-signal-safe: atomics only). When every slot is busy, the
// constructor waits for one to be released, unless the calling thread
// holds a slot itself already (a transfer inside a transfer's reader,
// which waiting could deadlock): then it refuses and armed() is false.
// Faults read after the destructor ran are no longer answered: the reads
// of an armed range must be finished (in every thread) before it is
// disarmed.
class ZeroFillRange {
 public:
  static constexpr std::size_t kSlots = 64;

  // `poison` (may be null) is set, never cleared, when a read of the range
  // faults; it must outlive the range.
  ZeroFillRange(const void* src, std::size_t n, std::atomic<bool>* poison = nullptr) noexcept;
  ~ZeroFillRange();
  ZeroFillRange(const ZeroFillRange&) = delete;
  ZeroFillRange& operator=(const ZeroFillRange&) = delete;

  // false: every slot was busy and this thread holds one (refused). An
  // empty range needs no slot and is always armed.
  bool armed() const noexcept { return slot_ != kRefused; }
  // Whether a read of the range faulted so far (its page now reads zeros).
  bool faulted() const noexcept;
  // Disarms now (the destructor then does nothing); returns faulted().
  bool disarm() noexcept;

 private:
  static constexpr int kNone = -1;     // empty range, or disarmed
  static constexpr int kRefused = -2;  // no slot
  int slot_ = kNone;
  bool faulted_ = false;  // as read at disarm()
};

// A zero-copy registration's range, armed for as long as it lives (see
// above). Never waits: when all kSlots are taken, armed() is false and the
// caller must not hand the range to a reader it does not run (DeviceWeights
// uploads that file's weights instead).
class RegistrationArm {
 public:
  static constexpr std::size_t kSlots = 4096;

  RegistrationArm(const void* src, std::size_t n, std::atomic<bool>* poison) noexcept;
  ~RegistrationArm();
  RegistrationArm(const RegistrationArm&) = delete;
  RegistrationArm& operator=(const RegistrationArm&) = delete;

  bool armed() const noexcept { return slot_ >= 0 || empty_; }
  bool faulted() const noexcept;

 private:
  int slot_ = -1;
  bool empty_ = false;
};

// Slots armed right now (for tests): ZeroFillRange's and RegistrationArm's.
std::size_t zero_fill_slots_in_use() noexcept;
std::size_t registration_slots_in_use() noexcept;

// Whether the handler has been installed (it is, on the first copy).
bool sigbus_guard_installed() noexcept;

}  // namespace ballast::store
