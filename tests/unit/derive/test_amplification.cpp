// Issue 24 §5: a small file cannot make ballast derive or hold unbounded
// bytes. Plans are capped at PlanOptions::max_amplification times the
// referenced source bytes, the auto budget counts overlapping ranges the
// way residency keys them (and is capped the same way), and a block_size
// that does not fit the launch's 32 bits is refused before narrowing.
#include "support/text.hpp"
#include <ballast/derive.hpp>
#include <ballast/residency.hpp>
#include <doctest/doctest.h>

#include "unit/onnx/load_helpers.hpp"
#include "unit/onnx/proto_builder.hpp"
#include "unit/store/scratch_dir.hpp"

#include <cstring>
#include <span>
#include <string>
#include <vector>

using namespace ballast;
using namespace ballast::testing;

namespace {

using ballast::testing::contains;

// `bytes` must outlive the model (its names are views into them).
Result<Model> load_proto_bytes(const std::vector<std::uint8_t>& bytes) {
  return load_onnx_from_bytes(std::as_bytes(std::span(bytes)), ".");
}

// `consumers` MatMulNBits nodes over one B (N=16, K=1024, block 128), each
// with scales of its own (so no two plans are the same derivation). Each
// node derives 32 KiB of f16 plus its repack from 8 KiB of B and 256 bytes
// of scales.
std::vector<std::uint8_t> shared_b_model(int consumers, std::int64_t block_size = 128) {
  using namespace onnx_proto;
  Proto g;
  Proto b = tensor("B", 2, {16, 8, 64});
  raw_data(b, std::vector<std::uint8_t>(16 * 8 * 64, 0x5a));
  g.msg(5, b);
  for (int i = 0; i < consumers; ++i) {
    const std::string s = "scales_" + std::to_string(i), y = "y_" + std::to_string(i);
    Proto sc = tensor(s, 10, {16 * 8});  // float16
    std::vector<std::uint8_t> bytes(16 * 8 * 2);
    for (std::size_t k = 0; k < bytes.size(); k += 2) {
      bytes[k] = static_cast<std::uint8_t>(i);
      bytes[k + 1] = 0x3c;
    }
    raw_data(sc, bytes);
    g.msg(5, sc);
    Proto n;
    n.str(1, "X").str(1, "B").str(1, s).str(2, y).str(4, "MatMulNBits").str(7, "com.microsoft");
    n.msg(5, attribute_int("K", 1024)).msg(5, attribute_int("N", 16)).msg(5, attribute_int("bits", 4));
    n.msg(5, attribute_int("block_size", block_size));
    g.msg(1, n);
  }
  g.str(2, "g");
  return onnx_proto::model(g).data;
}

}  // namespace

TEST_CASE("a plan that would derive far more than the model references is refused with the ratio") {
  static const std::vector<std::uint8_t> few = shared_b_model(2);
  auto small = load_proto_bytes(few);
  REQUIRE_MESSAGE(small.ok(), small.error().to_string());
  auto fine = plan_derivations(*small);
  REQUIRE_MESSAGE(fine.ok(), fine.error().to_string());
  CHECK(fine->size() == 4);

  static const std::vector<std::uint8_t> many = shared_b_model(400);
  auto big = load_proto_bytes(many);
  REQUIRE_MESSAGE(big.ok(), big.error().to_string());
  auto refused = plan_derivations(*big);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.code() == ErrorCode::unsupported);
  const std::string text = refused.error().to_string();
  CAPTURE(text);
  CHECK(contains(text, "the plan's 800 derivations would make "));
  CHECK(contains(text, "above the cap of 64x"));
  CHECK(contains(text, "max_amplification"));
  // The cap is the engine's to raise (or lift).
  PlanOptions lifted;
  lifted.max_amplification = 0;
  auto all = plan_derivations(*big, lifted);
  REQUIRE(all.ok());
  CHECK(all->size() == 800);
  PlanOptions raised;
  raised.max_amplification = 1e6;
  CHECK(plan_derivations(*big, raised).ok());
  // auto_budget plans under the same cap, and checks its own total.
  CHECK(auto_budget(*big).code() == ErrorCode::unsupported);
  CHECK(auto_budget(*big, 0).ok());
  CHECK(auto_budget(big->store(), *all).code() == ErrorCode::unsupported);
}

TEST_CASE("overlapping ranges count once each in the auto budget, as residency keys them, and are capped") {
  ScratchDir dir("amplification_overlap");
  // 200 float32 [16, 16] weights, each one float further into one blob:
  // 1 KiB each, 1.8 KiB of file in all.
  const int n = 200;
  std::vector<std::uint8_t> blob((n + 16 * 16) * 4, 0x3f);
  dir.write("w.bin", blob);
  using namespace onnx_proto;
  Proto g;
  for (int i = 0; i < n; ++i) {
    const std::string name = "w" + std::to_string(i);
    Proto t = tensor(name, 1, {16, 16});
    const std::string offset = std::to_string(i * 4);
    external(t, {{"location", "w.bin"}, {"offset", offset}, {"length", "1024"}});
    g.msg(5, t);
  }
  g.str(2, "g");
  auto m = load_onnx(dir.write("model.onnx", onnx_proto::model(g).data));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  // Sources only: the union is 1,820 bytes, residency would hold 200 KiB.
  auto capped = auto_budget(m->store(), {});
  REQUIRE_FALSE(capped.ok());
  CHECK(capped.code() == ErrorCode::unsupported);
  CAPTURE(capped.error().to_string());
  CHECK(contains(capped.error().to_string(), "in overlapping ranges"));
  auto b = auto_budget(m->store(), {}, 0);
  REQUIRE(b.ok());
  CHECK(b->external_bytes == (n - 1) * 4 + 1024);
  CHECK(b->source_bytes == std::uint64_t{n} * 1024);
  CHECK(b->overlap_bytes == b->source_bytes - b->external_bytes);
}

TEST_CASE("a block_size that does not fit 32 bits is refused by value, never narrowed") {
  for (std::int64_t bad : {(std::int64_t{1} << 32) + 16, std::int64_t{1} << 33}) {
    CAPTURE(bad);
    static std::vector<std::vector<std::uint8_t>> keep;
    keep.push_back(shared_b_model(1, bad));
    auto m = load_proto_bytes(keep.back());
    REQUIRE_MESSAGE(m.ok(), m.error().to_string());
    auto plan = plan_derivations(*m);
    REQUIRE_FALSE(plan.ok());
    CHECK(contains(plan.error().to_string(), "block_size " + std::to_string(bad) + " does not fit in 32 bits"));
  }
}
