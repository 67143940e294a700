// Every allocation the loader makes may fail: each one, in turn, is made to
// throw std::bad_alloc, and the load must then end in an out_of_memory
// error (or succeed), never in an abort. This binary replaces the global
// operator new, so it is a test of its own.
#include "unit/onnx/external_fixture.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

// GCC cannot see that these replace operator new/delete as a pair.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
// Allocations left before one fails; negative: none fails.
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
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

using namespace ballast;
using namespace ballast::testing;
using namespace ballast::testing::onnx_proto;

TEST_CASE("an allocation failure anywhere in the loader is an out_of_memory error, never an abort") {
  ScratchDir dir("alloc-failure");
  dir.write_pattern("blob.bin", 256);
  Entries e = at("blob.bin", 0);
  e.emplace_back("basepath", "x");
  Proto ints = tensor("ints", 7, {3});
  ints.packed_varints(7, {1, -1, 300});
  Proto floats = tensor("floats", 1, {2});
  floats.f32(4, 1.0f).f32(4, 2.0f);
  const Proto g = graph({node("Identity", {"a"}, {"b"})},
                        {external_tensor("w", 16, e), external_tensor("v", 8, at("./blob.bin", 64)), ints, floats});
  const auto path = dir.write("model.onnx", model(g).data);
  int failures = 0;
  for (long n = 0; n < 100000; ++n) {
    g_failed = false;
    g_allocations_left = n;
    Result<Model> r = load_onnx(path);
    g_allocations_left = -1;
    if (!g_failed) {  // every allocation of a whole load went through
      REQUIRE_MESSAGE(r.ok(), r.error().to_string());
      MESSAGE(n << " allocations, each made to fail once");
      break;
    }
    ++failures;
    if (!r.ok()) CHECK_MESSAGE(r.code() == ErrorCode::out_of_memory, r.error().to_string());
  }
  CHECK(failures > 10);
}
