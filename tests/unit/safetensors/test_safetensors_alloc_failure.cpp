// Every allocation of a safetensors open may fail: each one, in turn, is
// made to throw std::bad_alloc (inside nlohmann's parser too), and the open
// must then end in an out_of_memory error (or succeed), never in an abort
// or a leak (the asan stage runs this). This binary replaces the global
// operator new, so it is a test of its own.
#include "unit/safetensors/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<long> g_allocations_left{-1};
std::atomic<bool> g_failed{false};
}  // namespace

void* operator new(std::size_t size) {
  if (g_allocations_left.load(std::memory_order_relaxed) >= 0 && g_allocations_left.fetch_sub(1) == 0) {
    g_failed = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return ::operator new(size); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them),
// failing in turn like the others: the sort must cope with no buffer.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (g_allocations_left.load(std::memory_order_relaxed) >= 0 && g_allocations_left.fetch_sub(1) == 0) {
    g_failed = true;
    return nullptr;
  }
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& t) noexcept { return ::operator new(size, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

using namespace ballast;
using namespace ballast::testing;

namespace {

void each_allocation_fails(const std::filesystem::path& path) {
  int failures = 0;
  for (long n = 0; n < 100000; ++n) {
    g_failed = false;
    g_allocations_left = n;
    Result<Model> r = open_model(path);
    g_allocations_left = -1;
    if (!g_failed) {
      REQUIRE_MESSAGE(r.ok(), r.error().to_string());
      MESSAGE(n << " allocations, each made to fail once");
      break;
    }
    ++failures;
    if (!r.ok()) CHECK_MESSAGE(r.code() == ErrorCode::out_of_memory, r.error().to_string());
  }
  CHECK(failures > 10);
}

}  // namespace

TEST_CASE("an allocation failure anywhere in a safetensors open is an out_of_memory error") {
  ScratchDir dir("st-alloc-failure");
  const auto path = dir.write("model.safetensors",
                              st_file({{"a.weight", "F32", {2, 2}, pattern(16)}, {"b", "BF16", {3}, pattern(6)}},
                                      {{"format", "pt"}}));
  each_allocation_fails(path);
}

TEST_CASE("an allocation failure anywhere in a sharded open is an out_of_memory error") {
  ScratchDir dir("st-alloc-failure-index");
  dir.write("s1.safetensors", st_file({{"x", "U8", {4}, pattern(4)}, {"dead", "U8", {2}, pattern(2)}}));
  dir.write("s2.safetensors", st_file({{"y", "F16", {2}, pattern(4)}}));
  const auto index = dir.write("model.safetensors.index.json",
                               std::string(R"({"metadata":{"total_size":8},"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})"));
  each_allocation_fails(index);
}
