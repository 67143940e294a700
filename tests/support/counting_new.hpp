// Replaces the global operator new (throwing and nothrow forms) with one
// that counts the heap, for the hostile tables' memory bound on each case,
// and gives their time bound. Include it in exactly one file of a test
// binary: it defines the replacements.
#pragma once

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

// GCC cannot see that these replace operator new/delete as a pair.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// Heap use, for the memory bound of each case: every C++ allocation of the
// process (ballast's and nlohmann's) goes through these.
namespace ballast::testing {
inline std::atomic<std::size_t> g_heap{0};
inline std::atomic<std::size_t> g_peak{0};
inline void* counted(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  const std::size_t now = g_heap += malloc_usable_size(p);
  std::size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  return p;
}
inline void uncounted(void* p) noexcept {
  if (p == nullptr) return;
  g_heap -= malloc_usable_size(p);
  std::free(p);
}
}  // namespace ballast::testing

using ballast::testing::counted;
using ballast::testing::uncounted;

void* operator new(std::size_t n) { return counted(std::malloc(n == 0 ? 1 : n)); }
void* operator new[](std::size_t n) { return counted(std::malloc(n == 0 ? 1 : n)); }
void* operator new(std::size_t n, std::align_val_t a) {
  return counted(std::aligned_alloc(static_cast<std::size_t>(a), (n + static_cast<std::size_t>(a) - 1) / static_cast<std::size_t>(a) * static_cast<std::size_t>(a)));
}
void* operator new[](std::size_t n, std::align_val_t a) { return operator new(n, a); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them):
// whatever this file's delete frees must have come from this file's new.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p != nullptr) counted(p);
  return p;
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try {
    return operator new(n, a);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t& t) noexcept { return operator new(n, a, t); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { uncounted(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { uncounted(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { uncounted(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { uncounted(p); }
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete[](void* p) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t) noexcept { uncounted(p); }
void operator delete(void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }

namespace ballast::testing {

// Peak heap growth while `fn` runs.
template <class Fn>
std::size_t peak_growth(Fn&& fn) {
  const std::size_t base = g_heap.load();
  g_peak = base;
  fn();
  return g_peak.load() - base;
}

constexpr std::size_t kMemoryBound = std::size_t{64} << 20;

// The time bound is for optimized builds (the dev and release presets). A
// sanitizer or -O0 build (the asan stage) is many times slower everywhere:
// there the bound only catches a blow-up (quadratic work, a hang).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__OPTIMIZE__)
constexpr double kTimeBound = 30.0;
#else
constexpr double kTimeBound = 1.0;
#endif

}  // namespace ballast::testing

