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
// docs/reliability.md has the reasoning.
#pragma once

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

  ZeroFillRange(const void* src, std::size_t n) noexcept;
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

// Slots armed right now (for tests).
std::size_t zero_fill_slots_in_use() noexcept;

// Whether the handler has been installed (it is, on the first copy).
bool sigbus_guard_installed() noexcept;

}  // namespace ballast::store
