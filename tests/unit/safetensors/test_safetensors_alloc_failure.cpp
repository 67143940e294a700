// Every allocation of a safetensors open may fail: each one, in turn, is
// made to throw std::bad_alloc (inside nlohmann's parser too), and the open
// must then end in an out_of_memory error (or succeed), never in an abort
// or a leak (the asan stage runs this). This binary replaces the global
// operator new, so it is a test of its own.
#include "unit/safetensors/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include "support/failing_new.hpp"

using namespace ballast;
using namespace ballast::testing;

namespace {

void opens_under_failing_allocations(const std::filesystem::path& path) {
  CHECK(ballast::testing::each_allocation_fails([&] { return open_model(path); }) > 10);
}

}  // namespace

TEST_CASE("an allocation failure anywhere in a safetensors open is an out_of_memory error") {
  ScratchDir dir("st-alloc-failure");
  const auto path = dir.write("model.safetensors",
                              st_file({{"a.weight", "F32", {2, 2}, pattern(16)}, {"b", "BF16", {3}, pattern(6)}},
                                      {{"format", "pt"}}));
  opens_under_failing_allocations(path);
}

TEST_CASE("an allocation failure anywhere in a sharded open is an out_of_memory error") {
  ScratchDir dir("st-alloc-failure-index");
  dir.write("s1.safetensors", st_file({{"x", "U8", {4}, pattern(4)}, {"dead", "U8", {2}, pattern(2)}}));
  dir.write("s2.safetensors", st_file({{"y", "F16", {2}, pattern(4)}}));
  const auto index = dir.write("model.safetensors.index.json",
                               std::string(R"({"metadata":{"total_size":8},"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}})"));
  opens_under_failing_allocations(index);
}
