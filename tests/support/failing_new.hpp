// Replaces the global operator new (throwing and nothrow forms) with one that
// can be told to fail the Nth allocation, for the tests that make every
// allocation of an operation fail in turn. Include it in exactly one file of
// a test binary: it defines the replacements.
#pragma once

#include <ballast/status.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>

// GCC cannot see that these replace operator new/delete as a pair.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace ballast::testing {
// Allocations left before one fails; negative: none fails.
inline std::atomic<long> g_allocations_left{-1};
inline std::atomic<bool> g_allocation_failed{false};

inline bool fail_this_allocation() noexcept {
  if (g_allocations_left.load(std::memory_order_relaxed) >= 0 && g_allocations_left.fetch_sub(1) == 0) {
    g_allocation_failed = true;
    return true;
  }
  return false;
}

// Runs `op` with its 0th, 1st, ... allocation made to fail until one run
// makes every allocation it needs: each failing run must end in an
// out_of_memory error (or succeed), the last must succeed. Returns how many
// runs had an allocation fail.
template <class Op>
int each_allocation_fails(Op&& op) {
  int failures = 0;
  for (long n = 0; n < 100000; ++n) {
    g_allocation_failed = false;
    g_allocations_left = n;
    auto r = op();
    g_allocations_left = -1;
    if (!g_allocation_failed) {
      REQUIRE_MESSAGE(r.ok(), r.error().to_string());
      MESSAGE(n << " allocations, each made to fail once");
      break;
    }
    ++failures;
    if (!r.ok()) CHECK_MESSAGE(r.code() == ErrorCode::out_of_memory, r.error().to_string());
  }
  return failures;
}
}  // namespace ballast::testing

void* operator new(std::size_t size) {
  if (ballast::testing::fail_this_allocation()) throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them):
// what this file's delete frees must come from this file's new.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (ballast::testing::fail_this_allocation()) return nullptr;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& t) noexcept { return ::operator new(size, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
