// Every allocation the loader makes may fail: each one, in turn, is made to
// throw std::bad_alloc, and the load must then end in an out_of_memory
// error (or succeed), never in an abort. This binary replaces the global
// operator new, so it is a test of its own.
#include "unit/onnx/external_fixture.hpp"

#include "support/failing_new.hpp"

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
  CHECK(each_allocation_fails([&] { return load_onnx(path); }) > 10);
}
