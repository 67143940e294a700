// Replaces the global operator new with one that fails the Nth allocation
// of the armed thread only: other threads (a backend's workers, a waiter
// on the same key) never fail, so a test can make each allocation of one
// operation fail in turn while the rest of the process runs. Include it in
// exactly one file of a test binary: it defines the replacements.
#pragma once

#include <cstdlib>
#include <new>

// GCC cannot see that these replace operator new/delete as a pair.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace ballast::testing {
// Allocations left on this thread before one fails; negative: none fails.
inline thread_local long t_allocations_left = -1;
// Set when an allocation of this thread was made to fail.
inline thread_local bool t_failed = false;
}  // namespace ballast::testing

void* operator new(std::size_t size) {
  using ballast::testing::t_allocations_left;
  if (t_allocations_left >= 0 && t_allocations_left-- == 0) {
    ballast::testing::t_failed = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
