// auto_budget(): referenced source bytes + planned derivations' outputs,
// from the accounting, never from file lengths (issue 17, part 2).
#include <ballast/residency.hpp>
#include <doctest/doctest.h>

#include "support/orphaned_prefix_model.hpp"
#include "unit/onnx/proto_builder.hpp"
#include "unit/store/scratch_dir.hpp"

#include <filesystem>

using namespace ballast;
using testing::Proto;

TEST_CASE("auto budget of the orphaned-prefix model: the live half plus derivations, exactly") {
  using M = test_models::OrphanedPrefixModel;
  testing::ScratchDir dir("budget_orphaned");
  const auto files = M::write(dir.path());
  REQUIRE(std::filesystem::file_size(files.data) == M::kFileBytes);
  auto model = load_onnx(files.onnx);
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  auto b = auto_budget(*model);
  REQUIRE_MESSAGE(b.ok(), b.status().to_string());
  CHECK(b->external_bytes == M::kReferenced);  // 29056: the 29056-byte prefix is not counted
  CHECK(b->inline_bytes == 0);
  CHECK(b->source_bytes == M::kReferenced);
  CHECK(b->derived_bytes == M::kDerived);  // 49536
  CHECK(b->derivations == M::kDerivations);
  CHECK(b->total == M::kReferenced + M::kDerived);              // 78592
  CHECK(b->total + M::kPrefix == M::kFileBytes + M::kDerived);  // what a file-length budget would say
  // The two-argument form over the same plan agrees.
  auto plan = plan_derivations(*model);
  REQUIRE(plan.ok());
  auto again = auto_budget(model->store(), *plan);
  REQUIRE(again.ok());
  CHECK(again->total == b->total);
}

TEST_CASE("auto budget: aliased weights count once, inline weights count, no plan means source only") {
  testing::ScratchDir dir("budget_alias");
  // 4096 dead bytes, then one float32 [32, 16] tensor named twice.
  std::vector<std::uint8_t> blob(4096 + 32 * 16 * 4, 0x3c);
  dir.write("w.bin", blob);
  auto ext = [](const char* name) {
    Proto t = testing::onnx_proto::tensor(name, 1, {32, 16});
    return testing::onnx_proto::external(t, {{"location", "w.bin"}, {"offset", "4096"}, {"length", "2048"}});
  };
  Proto in = testing::onnx_proto::tensor("bias", 1, {16});
  testing::onnx_proto::raw_data(in, std::vector<std::uint8_t>(64, 1));
  auto node = [](const char* name, const char* b, const char* out) {
    Proto n;
    n.str(1, "X").str(1, b).str(2, out).str(3, name).str(4, "MatMul");
    return n;
  };
  Proto g;
  g.msg(1, node("m0", "wa", "y0")).msg(1, node("m1", "wb", "y1"));
  g.str(2, "g");
  g.msg(5, ext("wa")).msg(5, ext("wb")).msg(5, in);
  const Proto m = testing::onnx_proto::model(g);
  auto model = load_onnx(dir.write("model.onnx", m.data));
  REQUIRE_MESSAGE(model.ok(), model.status().to_string());
  auto plan = plan_derivations(*model);
  REQUIRE(plan.ok());
  CHECK(plan->size() == 6);  // planned per weight name
  auto b = auto_budget(*model);
  REQUIRE(b.ok());
  CHECK(b->external_bytes == 2048);
  CHECK(b->inline_bytes == 64);
  CHECK(b->source_bytes == 2048 + 64);
  CHECK(b->derivations == 3);  // the same bytes with the same parameters: the memo shares them
  CHECK(b->derived_bytes == 2048 + 1024 + (512 + 16 * 4));
  CHECK(b->total == b->source_bytes + b->derived_bytes);

  auto none = auto_budget(model->store(), {});
  REQUIRE(none.ok());
  CHECK(none->derived_bytes == 0);
  CHECK(none->total == 2048 + 64);
}

TEST_CASE("auto budget: a launch that cannot be sized, or sums past 64 bits, is an error") {
  WeightStore store;
  PlannedDerivation p;
  p.launch.kind = Derivation::transpose;
  p.weight = "huge";
  p.launch.src_type = DataType::float64;
  p.launch.rows = std::uint64_t{1} << 40;
  p.launch.cols = std::uint64_t{1} << 40;
  std::vector<PlannedDerivation> plan{p};
  auto bad = auto_budget(store, plan);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.code() == ErrorCode::overflow);
  CHECK(bad.error().tensor == "huge");

  plan.clear();
  for (std::uint64_t i = 0; i < 4; ++i) {  // four distinct 2^62-byte outputs
    p.launch.src_type = DataType::uint8;
    p.launch.rows = std::uint64_t{1} << 31;
    p.launch.cols = (std::uint64_t{1} << 31) + i;
    plan.push_back(p);
  }
  auto sum = auto_budget(store, plan);
  REQUIRE_FALSE(sum.ok());
  CHECK(sum.code() == ErrorCode::overflow);
}
