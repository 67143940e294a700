#include "store/sigbus_guard.hpp"

#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>

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

// What would have happened without ballast.
void chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = g_previous;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, context);
      return;
    }
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // No handler before ours (a fault cannot be ignored: the kernel forces the
  // default). Put the default back and let it happen: a fault re-executes
  // the faulting instruction on return and dies of it, with the usual core
  // dump; a SIGBUS sent by kill() is raised again, pending until we return.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGBUS, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(SIGBUS);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  Frame* frame = t_frame;
  // si_code > 0: raised by the kernel for a fault (not by kill or sigqueue).
  if (frame != nullptr && info != nullptr && info->si_code > 0) {
    const auto* at = static_cast<const char*>(info->si_addr);
    if (at >= frame->begin && at < frame->end) siglongjmp(frame->jump, 1);
  }
  const int saved_errno = errno;
  chain(sig, info, context);
  errno = saved_errno;
}

void install() noexcept {
  // Read the previous disposition first, then install: a fault in another
  // thread in between still finds it.
  ::sigaction(SIGBUS, nullptr, &g_previous);
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGBUS, &sa, nullptr) == 0) g_installed.store(true);
}

}  // namespace

bool sigbus_guard_installed() noexcept { return g_installed.load(); }

bool guarded_copy(void* dst, const void* src, std::size_t n) noexcept {
  if (n == 0) return true;
  static const bool once = (install(), true);
  static_cast<void>(once);
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

}  // namespace ballast::store
