#include "store/sigbus_guard.hpp"

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>

#include <pthread.h>

#include <sys/mman.h>
#include <unistd.h>

namespace ballast::store {
namespace {

// The guarded copy a thread is in, if any. Static TLS (initial-exec): the
// handler reads it, and dynamic TLS may allocate on first access.
struct Frame {
  const char* begin;
  const char* end;
  sigjmp_buf jump;
};
thread_local Frame* t_frame __attribute__((tls_model("initial-exec"))) = nullptr;

struct sigaction g_previous {};
std::atomic<bool> g_installed{false};
std::uintptr_t g_page_size = 4096;  // set by install(), before the handler can run

// The armed ranges of ZeroFillRange. A slot's word packs a generation
// (bumped on every claim), a faulted bit and a state; the handler marks a
// fault with a compare-exchange on the word it validated, so a slot that
// was released and claimed again meanwhile (another generation) is never
// marked by a fault that was not its own.
constexpr std::uint64_t kFree = 0, kBusy = 1, kArmed = 2, kStateMask = 3;
constexpr std::uint64_t kFaulted = 4;
constexpr std::uint64_t kGenerationOne = 8;

struct Slot {
  std::atomic<std::uint64_t> word{kFree};
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<std::atomic<bool>*> poison{nullptr};  // set with the faulted bit, when not null
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uintptr_t>::is_always_lock_free &&
                  std::atomic<std::atomic<bool>*>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the handler may only touch lock-free atomics");
Slot g_slots[ZeroFillRange::kSlots];
// RegistrationArm's table: long-lived ranges, claimed without waiting.
Slot g_registration_slots[RegistrationArm::kSlots];
// Bumped (and notified) whenever a slot is released: what waiters wait on.
std::atomic<std::uint32_t> g_released{0};
// Slots the calling thread holds (it must not wait for one then).
thread_local int t_slots_held = 0;

// Whether `at` lies in an armed range of `table` (a seqlock read of each slot).
template <std::size_t N>
bool in_armed_range(Slot (&table)[N], std::uintptr_t at) noexcept {
  for (Slot& slot : table) {
    const std::uint64_t w = slot.word.load(std::memory_order_acquire);
    if ((w & kStateMask) != kArmed) continue;
    const std::uintptr_t b = slot.begin.load(std::memory_order_relaxed);
    const std::uintptr_t e = slot.end.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.word.load(std::memory_order_relaxed) != w) continue;  // released and claimed again meanwhile
    if (at >= b && at < e) return true;
  }
  return false;
}

// Marks every armed range of `table` that overlaps [lo, hi) as faulted
// (and its poison flag): all of them read the zero page now, whichever
// thread faulted first.
template <std::size_t N>
void mark_faulted(Slot (&table)[N], std::uintptr_t lo, std::uintptr_t hi) noexcept {
  for (Slot& slot : table) {
    std::uint64_t w = slot.word.load(std::memory_order_acquire);
    while ((w & kStateMask) == kArmed && (w & kFaulted) == 0) {
      const std::uintptr_t b = slot.begin.load(std::memory_order_relaxed);
      const std::uintptr_t e = slot.end.load(std::memory_order_relaxed);
      std::atomic<bool>* const poison = slot.poison.load(std::memory_order_relaxed);
      if (b >= hi || e <= lo) break;
      // Fails when the word changed: marked by another fault (done), or
      // another generation (then b, e and poison may be its, and are read
      // again). Success validates all three as this generation's.
      if (slot.word.compare_exchange_weak(w, w | kFaulted, std::memory_order_acq_rel, std::memory_order_acquire)) {
        if (poison != nullptr) poison->store(true, std::memory_order_release);
        break;
      }
    }
  }
}

// The zero-fill answer: true when the fault was ours and the page now reads
// zeros (the handler may return), false to chain.
bool zero_fill(const siginfo_t* info) noexcept {
  if (info == nullptr || info->si_code != BUS_ADRERR) return false;  // a vanished page, nothing else
  const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
  if (!in_armed_range(g_slots, at) && !in_armed_range(g_registration_slots, at)) return false;
  const std::uintptr_t page = at & ~(g_page_size - 1);
  // mmap(2) is a plain system call on Linux (not on POSIX's list of
  // async-signal-safe functions, but it takes no user-space lock).
  void* p = ::mmap(reinterpret_cast<void*>(page), g_page_size, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (p == MAP_FAILED) return false;  // (out of mappings) returning would fault forever: die as without ballast
  mark_faulted(g_slots, page, page + g_page_size);
  mark_faulted(g_registration_slots, page, page + g_page_size);
  return true;
}

// SA_RESETHAND on the previous disposition: it runs once, then the default
// is the disposition (as the kernel would have reset it on delivery).
std::atomic<bool> g_previous_spent{false};

// The default action, as the kernel would take it.
void die_by_default(const siginfo_t* info) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
  // A fault re-executes the faulting instruction on return and dies of it,
  // with the usual core dump; a SIGBUS sent by kill() is raised again,
  // pending (SIGBUS is blocked in here) until we return.
  if (info == nullptr || info->si_code <= 0) ::raise(SIGBUS);
}

// What would have happened without ballast: the previous disposition, with
// its flags, exactly as the kernel would have applied it.
void chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = g_previous;
  const bool sent = info == nullptr || info->si_code <= 0;
  // SIG_DFL and SIG_IGN are what the kernel reads in the union, whether or
  // not SA_SIGINFO is set (SIG_IGN with SA_SIGINFO still ignores).
  const bool has_handler = prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN;
  const bool spent = (prev.sa_flags & SA_RESETHAND) != 0 && has_handler &&
                     g_previous_spent.exchange(true, std::memory_order_acq_rel);
  if (!has_handler || spent) {
    // SIG_IGN ignores a sent signal; a fault cannot be ignored (the kernel
    // forces the default), so it dies like SIG_DFL.
    if (!spent && prev.sa_handler == SIG_IGN && sent) return;
    die_by_default(info);
    return;
  }
  // The mask the kernel would have set for that handler: the thread's mask
  // at the signal (ours adds only SIGBUS) plus its sa_mask, and SIGBUS
  // itself unless SA_NODEFER. sigprocmask-class calls are async-signal-safe;
  // the kernel restores the interrupted mask when our handler returns.
  sigset_t mask;
  ::pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  for (int s = 1; s < NSIG; ++s)
    if (sigismember(&prev.sa_mask, s) == 1) sigaddset(&mask, s);
  if ((prev.sa_flags & SA_NODEFER) != 0) sigdelset(&mask, SIGBUS);
  ::pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  if ((prev.sa_flags & SA_SIGINFO) != 0)
    prev.sa_sigaction(sig, info, context);
  else
    prev.sa_handler(sig);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  Frame* frame = t_frame;
  // si_code > 0: raised by the kernel for a fault (not by kill or sigqueue).
  if (frame != nullptr && info != nullptr && info->si_code > 0) {
    const auto* at = static_cast<const char*>(info->si_addr);
    if (at >= frame->begin && at < frame->end) siglongjmp(frame->jump, 1);
  }
  const int saved_errno = errno;
  if (zero_fill(info)) {
    errno = saved_errno;
    return;  // the faulting instruction runs again and reads zeros
  }
  chain(sig, info, context);
  errno = saved_errno;
}

// Claims a free slot of `table` for [b, b + n) and publishes it armed;
// the slot's index, or -1 when every slot is taken. The generation is bumped
// on every claim, so the handler never marks a claim that is not its fault's.
template <std::size_t N>
int claim(Slot (&table)[N], std::uintptr_t b, std::size_t n, std::atomic<bool>* poison) noexcept {
  for (std::size_t i = 0; i < N; ++i) {
    Slot& slot = table[i];
    std::uint64_t w = slot.word.load(std::memory_order_relaxed);
    if ((w & kStateMask) != kFree) continue;
    const std::uint64_t generation = (w & ~(kGenerationOne - 1)) + kGenerationOne;
    if (!slot.word.compare_exchange_strong(w, generation | kBusy, std::memory_order_acq_rel)) continue;
    slot.begin.store(b, std::memory_order_relaxed);
    slot.end.store(b + n, std::memory_order_relaxed);
    slot.poison.store(poison, std::memory_order_relaxed);
    slot.word.store(generation | kArmed, std::memory_order_release);  // the range is published with it
    return static_cast<int>(i);
  }
  return -1;
}

void install() noexcept {
  if (const long page = ::sysconf(_SC_PAGESIZE); page > 0) g_page_size = static_cast<std::uintptr_t>(page);
  // Read the previous disposition first, then install: a fault in another
  // thread in between still finds it.
  ::sigaction(SIGBUS, nullptr, &g_previous);
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGBUS, &sa, nullptr) == 0) g_installed.store(true);
}

void install_once() noexcept {
  static const bool once = (install(), true);
  static_cast<void>(once);
}

}  // namespace

bool sigbus_guard_installed() noexcept { return g_installed.load(); }

bool guarded_copy(void* dst, const void* src, std::size_t n) noexcept {
  if (n == 0) return true;
  install_once();
  Frame frame;
  frame.begin = static_cast<const char*>(src);
  frame.end = frame.begin + n;
  Frame* const outer = t_frame;
  t_frame = &frame;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the handler sees the frame before the copy starts
  if (sigsetjmp(frame.jump, 1) != 0) {  // 1: the signal mask (SIGBUS blocked in the handler) is restored
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_frame = outer;
    return false;
  }
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_frame = outer;
  return true;
}

ZeroFillRange::ZeroFillRange(const void* src, std::size_t n, std::atomic<bool>* poison) noexcept {
  if (n == 0) return;  // nothing is read: nothing to arm
  install_once();
  const auto b = reinterpret_cast<std::uintptr_t>(src);
  for (;;) {
    const std::uint32_t released = g_released.load(std::memory_order_acquire);
    if (const int i = claim(g_slots, b, n, poison); i >= 0) {
      slot_ = i;
      ++t_slots_held;
      return;
    }
    if (t_slots_held > 0) {
      slot_ = kRefused;
      return;
    }
    g_released.wait(released, std::memory_order_acquire);  // until a slot is released (or was, since the scan)
  }
}

ZeroFillRange::~ZeroFillRange() { disarm(); }

bool ZeroFillRange::faulted() const noexcept {
  if (slot_ < 0) return faulted_;
  return (g_slots[slot_].word.load(std::memory_order_acquire) & kFaulted) != 0;
}

bool ZeroFillRange::disarm() noexcept {
  if (slot_ < 0) return faulted_;
  Slot& slot = g_slots[slot_];
  // Reads the faulted bit and frees the slot in one step (the generation stays).
  const std::uint64_t w = slot.word.exchange(slot.word.load(std::memory_order_relaxed) & ~(kGenerationOne - 1),
                                             std::memory_order_acq_rel);
  faulted_ = (w & kFaulted) != 0;
  slot_ = kNone;
  --t_slots_held;
  g_released.fetch_add(1, std::memory_order_release);
  g_released.notify_all();
  return faulted_;
}

RegistrationArm::RegistrationArm(const void* src, std::size_t n, std::atomic<bool>* poison) noexcept {
  if (n == 0) {
    empty_ = true;
    return;
  }
  install_once();
  const auto b = reinterpret_cast<std::uintptr_t>(src);
  slot_ = claim(g_registration_slots, b, n, poison);  // -1 when every slot is taken: not armed
}

RegistrationArm::~RegistrationArm() {
  if (slot_ < 0) return;
  Slot& slot = g_registration_slots[slot_];
  slot.word.store(slot.word.load(std::memory_order_relaxed) & ~(kGenerationOne - 1), std::memory_order_release);
}

bool RegistrationArm::faulted() const noexcept {
  if (slot_ < 0) return false;
  return (g_registration_slots[slot_].word.load(std::memory_order_acquire) & kFaulted) != 0;
}

namespace {
template <std::size_t N>
std::size_t busy(const Slot (&table)[N]) noexcept {
  std::size_t n = 0;
  for (const Slot& slot : table)
    if ((slot.word.load(std::memory_order_relaxed) & kStateMask) != kFree) ++n;
  return n;
}
}  // namespace

std::size_t zero_fill_slots_in_use() noexcept { return busy(g_slots); }
std::size_t registration_slots_in_use() noexcept { return busy(g_registration_slots); }

}  // namespace ballast::store
