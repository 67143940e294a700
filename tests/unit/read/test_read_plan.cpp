// ReadPlan::of: exactly the referenced bytes, merged where they touch or
// overlap, split at dead gaps; never an orphaned prefix.
#include <ballast/model.hpp>
#include <ballast/read_plan.hpp>

#include "support/orphaned_prefix_model.hpp"
#include "unit/read/read_fixture.hpp"

using namespace ballast;
using namespace ballast::testing;
using ballast::test_models::OrphanedPrefixModel;

TEST_CASE("the plan of a model with an orphaned prefix reads the live tensors only") {
  ScratchDir dir("read-plan-orphaned");
  const auto m = OrphanedPrefixModel::write(dir.path());
  auto model = open_model(m.onnx);
  REQUIRE(model.ok());
  const ReadPlan plan = ReadPlan::of(model->store());
  REQUIRE(plan.files().size() == 1);
  const ReadPlanFile& f = plan.files()[0];
  CHECK(f.path.filename() == "model.data");
  CHECK(f.file_bytes == OrphanedPrefixModel::kFileBytes);
  // w0, w1 and w2 lie end to end after the prefix: one range, no prefix byte.
  REQUIRE(f.ranges.size() == 1);
  CHECK(f.ranges[0] == ReadRange{OrphanedPrefixModel::kPrefix, OrphanedPrefixModel::kReferenced});
  CHECK(f.read_bytes == OrphanedPrefixModel::kReferenced);
  CHECK(plan.bytes() == OrphanedPrefixModel::kReferenced);
  CHECK(plan.range_count() == 1);
  REQUIRE(plan.weights().size() == 3);
  CHECK(plan.weights()[0].offset == OrphanedPrefixModel::kW0Offset);
  CHECK(plan.weights()[1].offset == OrphanedPrefixModel::kW1Offset);
  CHECK(plan.weights()[2].offset == OrphanedPrefixModel::kW2Offset);
  CHECK(plan.weights()[0].id == *model->value_id("w0"));
  CHECK(plan.weights()[2].length == OrphanedPrefixModel::kW2Bytes);
  CHECK_MESSAGE(contains(plan.to_string(), "1 file, 1 range, 29056 bytes to read"), plan.to_string());
  CHECK_MESSAGE(contains(plan.to_string(), "model.data: 1 range, 29056 bytes of 58112 bytes"), plan.to_string());

  // Only w2: its own bytes.
  const ValueId w2 = *model->value_id("w2");
  const ReadPlan only = ReadPlan::of(model->store(), std::span(&w2, 1));
  REQUIRE(only.files().size() == 1);
  REQUIRE(only.files()[0].ranges.size() == 1);
  CHECK(only.files()[0].ranges[0] == ReadRange{OrphanedPrefixModel::kW2Offset, OrphanedPrefixModel::kW2Bytes});
}

TEST_CASE("overlapping and touching weights merge; a dead gap splits; files in mapping order") {
  HandStore h("read-plan-merge");
  const MappingId a = h.file("a.bin", 65536);
  const MappingId b = h.file("b.bin", 8192);
  const ValueId d = h.weight(a, 10000, 2000);    // after a dead gap
  const ValueId e = h.weight(a, 10000, 2000);    // the same bytes as d (a shared tensor)
  const ValueId a0 = h.weight(a, 0, 1000);
  const ValueId a1 = h.weight(a, 500, 2500);     // overlaps a0
  const ValueId a2 = h.weight(a, 3000, 1000);    // touches a1's end
  const ValueId b0 = h.weight(b, 4096, 100);
  const ValueId empty = h.weight(b, 0, 0);       // no bytes: nothing to read or place
  static const std::byte inline_bytes[4] = {};
  WeightRef in;
  in.dtype = DataType::uint8;
  in.dims = {4};
  in.storage = WeightRef::Storage::inline_borrowed;
  in.inline_bytes = inline_bytes;
  REQUIRE(h.store.add(ValueId{100}, in).ok());

  const ReadPlan plan = ReadPlan::of(h.store);
  REQUIRE(plan.files().size() == 2);
  CHECK(plan.files()[0].mapping == a);
  CHECK(plan.files()[0].ranges == std::vector<ReadRange>{{0, 4000}, {10000, 2000}});
  CHECK(plan.files()[0].read_bytes == 6000);
  CHECK(plan.files()[1].mapping == b);
  CHECK(plan.files()[1].ranges == std::vector<ReadRange>{{4096, 100}});
  CHECK(plan.bytes() == 6100);
  CHECK(plan.range_count() == 3);
  // Weights by (mapping, offset): the inline one and the empty one are not there.
  std::vector<ValueId> order;
  for (const ReadPlanWeight& w : plan.weights()) order.push_back(w.id);
  CHECK(order == std::vector<ValueId>{a0, a1, a2, d, e, b0});
  (void)empty;
  CHECK_MESSAGE(contains(plan.to_string(), "2 files, 3 ranges, 6100 bytes to read"), plan.to_string());

  // A subset: a repeated id counts once; unknown and inline ids are ignored.
  const std::vector<ValueId> some{e, e, ValueId{999}, ValueId{100}, a2};
  const ReadPlan sub = ReadPlan::of(h.store, some);
  REQUIRE(sub.files().size() == 1);
  CHECK(sub.files()[0].ranges == std::vector<ReadRange>{{3000, 1000}, {10000, 2000}});
  REQUIRE(sub.weights().size() == 2);
  CHECK(sub.weights()[0].id == a2);
  CHECK(sub.weights()[1].id == e);
  CHECK(sub.bytes() == 3000);

  const ReadPlan none = ReadPlan::of(h.store, std::vector<ValueId>{ValueId{100}});
  CHECK(none.empty());
  CHECK(none.files().empty());
  CHECK(contains(none.to_string(), "0 files, 0 ranges, 0 bytes to read"));
}

TEST_CASE("sizes from one MiB up are written with two decimals, never rounded to whole MiB") {
  HandStore h("read-plan-mib");
  const MappingId a = h.file("a.bin", 3u << 20);
  (void)h.weight(a, 0, 2569011);  // 2.45 MiB
  const ReadPlan plan = ReadPlan::of(h.store);
  CHECK_MESSAGE(contains(plan.to_string(), "1 file, 1 range, 2.45 MiB to read"), plan.to_string());
  CHECK_MESSAGE(contains(plan.to_string(), ": 1 range, 2.45 MiB of 3.00 MiB"), plan.to_string());
}
