// The one-call derive API on the CPU backend: planning from the graph,
// derive_weights() in one batch, derive_weight() hitting what the batch
// memoized, consumers of shared bytes kept apart, errors naming the weight.
#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/model_resource.hpp>
#include <doctest/doctest.h>

#include "unit/onnx/load_helpers.hpp"
#include "unit/store/scratch_dir.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

using namespace ballast;
using namespace ballast::testing;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>((i * 37 + seed * 11) & 0xff);
  return out;
}

std::vector<std::uint8_t> floats(std::size_t n, float scale) {
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = scale * static_cast<float>(1 + i % 5);
  std::vector<std::uint8_t> out(n * 4);
  std::memcpy(out.data(), f.data(), out.size());
  return out;
}

// MatMul W [8, 16] f32, and one MatMulNBits B (N=4, K=64, block 32) under
// two scales tensors.
Model model() {
  using namespace onnx_proto;
  Proto w = tensor("W", 1, {8, 16});
  raw_data(w, floats(8 * 16, 0.25f));
  Proto b = tensor("B", 2, {4, 2, 16});
  raw_data(b, pattern(4 * 2 * 16, 3));
  Proto sa = tensor("scales_a", 1, {8});
  raw_data(sa, floats(8, 0.01f));
  Proto sb = tensor("scales_b", 1, {8});
  raw_data(sb, floats(8, 0.5f));
  auto nbits = [](std::string_view scales, std::string_view out) {
    return node("MatMulNBits", {"X", "B", scales}, {out},
                {attribute_int("K", 64), attribute_int("N", 4), attribute_int("bits", 4), attribute_int("block_size", 32)},
                "com.microsoft");
  };
  // The bytes must outlive the Model (its names are views into them).
  static const Proto bytes = onnx_proto::model(
      graph({node("MatMul", {"X", "W"}, {"Y"}), nbits("scales_a", "Q1"), nbits("scales_b", "Q2")}, {w, b, sa, sb}));
  auto m = load_proto(bytes);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  return std::move(*m);
}

}  // namespace

TEST_CASE("derive_weights memoizes every planned derivation once; derive_weight then hits") {
  Model m = model();
  auto plan = plan_derivations(m);
  REQUIRE_MESSAGE(plan.ok(), plan.error().to_string());
  // W: transpose, to_f16, quant_int8; B: dequant + repack under each scales.
  REQUIRE(plan->size() == 7);
  CHECK(std::count_if(plan->begin(), plan->end(), [](auto& p) { return p.kind() == Derivation::dequant_int4; }) == 2);

  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const auto baseline = (*gpu)->counters();
  {
    DeviceWeights sources(**gpu, m.store());
    DerivedWeights memo;
    TeardownHost<GpuBackend> host(**gpu);
    host.add(sources);
    host.add(memo);
    const DeriveContext ctx{**gpu, m, sources, memo};

    std::vector<DeriveProgress> seen;
    auto values = derive_weights(ctx, *plan, [&](const DeriveProgress& p) { seen.push_back(p); });
    REQUIRE_MESSAGE(values.ok(), values.error().to_string());
    REQUIRE(values->size() == plan->size());
    REQUIRE(seen.size() == plan->size());
    CHECK(seen.back().done == seen.back().total);
    CHECK(seen.back().source_bytes_done == seen.back().source_bytes_total);
    CHECK(memo.len() == 7);  // quant_int8 reads the planned transpose: shared, not rebuilt

    std::vector<DevicePtr> dequant;
    for (std::size_t i = 0; i < plan->size(); ++i) {
      CHECK((*values)[i].first != 0);
      if ((*plan)[i].kind() == Derivation::dequant_int4) dequant.push_back((*values)[i].first);
      // One at a time now: the same memoized value, nothing rebuilt.
      const auto builds = memo.stats().builds;
      auto again = derive_weight(ctx, (*plan)[i]);
      REQUIRE_MESSAGE(again.ok(), again.error().to_string());
      CHECK(again->first == (*values)[i].first);
      CHECK(again->second == (*values)[i].second);
      CHECK(memo.stats().builds == builds);
    }
    REQUIRE(dequant.size() == 2);
    CHECK(dequant[0] != dequant[1]);  // same B, other scales: two values
    // The scales differ by 50x, so the dequantised values must too.
    std::vector<std::byte> a(4 * 64 * 2), b(4 * 64 * 2);
    REQUIRE((*gpu)->copy_to_host(a, dequant[0], 0).ok());
    REQUIRE((*gpu)->copy_to_host(b, dequant[1], 0).ok());
    CHECK(a != b);

    auto by_name = derive_weight(ctx, "W", Derivation::transpose);
    REQUIRE_MESSAGE(by_name.ok(), by_name.error().to_string());
    CHECK(by_name->first == (*values)[0].first);

    auto missing = derive_weight(ctx, "nope", Derivation::transpose);
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.code() == ErrorCode::not_found);
    CHECK(missing.error().to_string().find("'nope'") != std::string::npos);
    auto wrong = derive_weight(ctx, "W", Derivation::dequant_int4);
    CHECK(wrong.code() == ErrorCode::invalid_argument);

    const auto report = host.teardown(**gpu);
    CHECK_MESSAGE(report.ok(), report.to_string());
  }
  const auto after = (*gpu)->counters();
  CHECK(after.live_allocations == baseline.live_allocations);
  CHECK(after.live_registrations == baseline.live_registrations);
}

// torch writes a shared module's second use as MatMul(x, Identity(W)), and
// without constant folding MatMul(x, Transpose(W)): derive_weight() by node
// reaches W through both, and the values are W's, built once.
TEST_CASE("derive_weight by node: through Identity and Transpose to the initializer, one value per key") {
  using namespace onnx_proto;
  Proto w = tensor("W", 1, {8, 16});
  raw_data(w, floats(8 * 16, 0.25f));
  static const Proto bytes = onnx_proto::model(
      graph({named_node("first", "MatMul", {"X", "W"}, {"Y0"}), named_node("id", "Identity", {"W"}, {"W_shared"}),
             named_node("shared", "MatMul", {"Y0", "W_shared"}, {"Y1"}),
             named_node("t", "Transpose", {"W"}, {"W_t"}, {attribute_ints("perm", {1, 0})}),
             named_node("nofold", "MatMul", {"Z", "W_t"}, {"Y2"})},
            {w}));
  auto m = load_proto(bytes);
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto node = [&](std::string_view name) -> const NodeInfo& {
    return *std::find_if(m->nodes().begin(), m->nodes().end(), [&](const NodeInfo& n) { return n.name == name; });
  };
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  DeviceWeights sources(**gpu, m->store());
  DerivedWeights memo;
  TeardownHost<GpuBackend> host(**gpu);
  host.add(sources);
  host.add(memo);
  const DeriveContext ctx{**gpu, *m, sources, memo};
  for (Derivation kind : {Derivation::transpose, Derivation::to_f16, Derivation::quant_int8}) {
    auto first = derive_weight(ctx, node("first"), kind);
    REQUIRE_MESSAGE(first.ok(), first.error().to_string());
    const auto builds = memo.stats().builds;
    auto shared = derive_weight(ctx, node("shared"), kind);
    REQUIRE_MESSAGE(shared.ok(), shared.error().to_string());
    CHECK(shared->first == first->first);  // the same key: a hit
    CHECK(memo.stats().builds == builds);
    auto nofold = derive_weight(ctx, node("nofold"), kind);
    REQUIRE_MESSAGE(nofold.ok(), nofold.error().to_string());
    // W stored [N, K] here: transpose and to_f16 are the same values,
    // quant_int8 is per stored row rather than of the transposed copy.
    if (kind == Derivation::quant_int8)
      CHECK(nofold->first != first->first);
    else
      CHECK(nofold->first == first->first);
  }
  // The Transpose's quant_int8 is W's rows, as Gemm transB=1 reads them.
  auto by_name = derive_weight(ctx, "W", Derivation::quant_int8);
  REQUIRE(by_name.ok());
  CHECK(by_name->first == derive_weight(ctx, node("nofold"), Derivation::quant_int8)->first);
  const auto report = host.teardown(**gpu);
  CHECK_MESSAGE(report.ok(), report.to_string());
}

TEST_CASE("a failing derivation names the weight and node, and leaves nothing allocated") {
  Model m = model();
  auto plan = plan_derivations(m);
  REQUIRE(plan.ok());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const auto baseline = (*gpu)->counters();
  {
    DeviceWeights sources(**gpu, m.store());
    DerivedWeights memo;
    TeardownHost<GpuBackend> host(**gpu);
    host.add(sources);
    host.add(memo);
    const DeriveContext ctx{**gpu, m, sources, memo};
    std::vector<PlannedDerivation> bad = *plan;
    bad[1].launch.rows = 1000;  // to_f16 of W reading far past its 512 bytes
    auto values = derive_weights(ctx, bad);
    REQUIRE_FALSE(values.ok());
    CHECK(values.error().to_string().find("'W'") != std::string::npos);
    CHECK(memo.len() == 0);  // nothing of the failed wave is memoized
    const auto report = host.teardown(**gpu);
    CHECK_MESSAGE(report.ok(), report.to_string());
  }
  CHECK((*gpu)->counters().live_allocations == baseline.live_allocations);
}

TEST_CASE("derive on the cpu backend: a data file truncated after load is an io error naming the file, not SIGBUS") {
  using namespace onnx_proto;
  ScratchDir dir("derive-file-changes");
  dir.write("w.bin", floats(8 * 16, 0.25f));
  Proto w = tensor("W", 1, {8, 16});
  external(w, {{"location", "w.bin"}, {"offset", "0"}, {"length", "512"}});
  const Proto bytes = onnx_proto::model(graph({node("MatMul", {"X", "W"}, {"Y"})}, {w}));
  auto m = load_onnx(dir.write("model.onnx", bytes.data));
  REQUIRE_MESSAGE(m.ok(), m.error().to_string());
  auto plan = plan_derivations(*m);
  REQUIRE(plan.ok());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const auto baseline = (*gpu)->counters();
  {
    DeviceWeights sources(**gpu, m->store());
    DerivedWeights memo;
    TeardownHost<GpuBackend> host(**gpu);
    host.add(sources);
    host.add(memo);
    const DeriveContext ctx{**gpu, *m, sources, memo};
    REQUIRE(derive_weight(ctx, "W", Derivation::transpose).ok());  // W is read in place from w.bin

    REQUIRE(::truncate((dir / "w.bin").c_str(), 0) == 0);
    const std::string changed = (dir / "w.bin").string() + " changed since it was opened (size 512, now 0)";
    auto one = derive_weight(ctx, "W", Derivation::to_f16);
    REQUIRE_FALSE(one.ok());
    CHECK(one.code() == ErrorCode::io);
    CHECK_MESSAGE(one.error().to_string().find(changed) != std::string::npos, one.error().to_string());
    CHECK(one.error().to_string().find("'W'") != std::string::npos);
    auto all = derive_weights(ctx, *plan);
    REQUIRE_FALSE(all.ok());
    CHECK(all.code() == ErrorCode::io);
    CHECK(memo.len() == 1);  // the transpose made before the change; nothing since
    const auto report = host.teardown(**gpu);
    CHECK_MESSAGE(report.ok(), report.to_string());
  }
  CHECK((*gpu)->counters().live_allocations == baseline.live_allocations);
}

// The memo's keys are the sources' device pointers: once DeviceWeights
// releases them, a new upload may take an old address and a lookup would
// hand back another weight's value. So a memo is tied to its sources'
// epoch, and refuses to derive from later ones until it is released too.
TEST_CASE("a memo whose sources were released refuses to derive until it is released as well") {
  Model m = model();
  auto plan = plan_derivations(m);
  REQUIRE(plan.ok());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  const auto baseline = (*gpu)->counters();
  {
    DeviceWeights sources(**gpu, m.store());
    DerivedWeights memo;
    DeriveContext ctx{**gpu, m, sources, memo};
    REQUIRE(derive_weights(ctx, *plan).ok());
    const std::uint64_t first = sources.epoch();
    REQUIRE(sources.release(**gpu).status.ok());
    CHECK(sources.epoch() != first);
    auto one = derive_weight(ctx, (*plan)[0]);
    REQUIRE(one.code() == ErrorCode::invalid_argument);
    CHECK_MESSAGE(one.error().to_string().find("released since") != std::string::npos, one.error().to_string());
    CHECK(derive_weights(ctx, *plan).code() == ErrorCode::invalid_argument);
    {  // a fresh DeviceWeights over the same store: new pointers all the same
      DeviceWeights fresh(**gpu, m.store());
      CHECK(fresh.epoch() != sources.epoch());
      DeriveContext other{**gpu, m, fresh, memo};
      CHECK(derive_weight(other, (*plan)[0]).code() == ErrorCode::invalid_argument);
      REQUIRE(fresh.release(**gpu).status.ok());
    }
    // Released together (as a TeardownHost does): the memo serves any sources.
    REQUIRE(memo.release(**gpu).status.ok());
    auto again = derive_weights(ctx, *plan);
    REQUIRE_MESSAGE(again.ok(), again.error().to_string());
    // And the values are the weights' own: W's transpose read back.
    const auto& t = (*again)[0];
    REQUIRE((*plan)[0].kind() == Derivation::transpose);
    std::vector<float> got(8 * 16), w(8 * 16);
    REQUIRE((*gpu)->copy_to_host(std::as_writable_bytes(std::span(got)), t.first, 0).ok());
    const auto src = floats(8 * 16, 0.25f);
    std::memcpy(w.data(), src.data(), src.size());
    bool same = true;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 16; ++c) same = same && got[c * 8 + r] == w[r * 16 + c];
    CHECK(same);
    REQUIRE(memo.release(**gpu).status.ok());
    REQUIRE(sources.release(**gpu).status.ok());
  }
  CHECK((*gpu)->counters().live_allocations == baseline.live_allocations);
}

// A PlannedDerivation is a plain struct: one from another model, or edited,
// is refused before anything reads its operands.
TEST_CASE("a plan entry from another model, or edited out of its weight's type and size, is refused") {
  Model m = model();
  auto plan = plan_derivations(m);
  REQUIRE(plan.ok());
  // Another model whose W is float16 [16, 16]: its ValueId 0-based numbering
  // need not match, and its transpose reads other bytes as another type.
  using namespace onnx_proto;
  Proto w16 = tensor("W", 10, {16, 16});
  raw_data(w16, pattern(16 * 16 * 2, 5));
  static const Proto other_bytes = onnx_proto::model(graph({node("MatMul", {"X", "W"}, {"Y"})}, {w16}));
  auto other = load_proto(other_bytes);
  REQUIRE(other.ok());
  auto other_plan = plan_derivations(*other);
  REQUIRE(other_plan.ok());
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  DeviceWeights sources(**gpu, m.store());
  DerivedWeights memo;
  TeardownHost<GpuBackend> host(**gpu);
  host.add(sources);
  host.add(memo);
  DeriveContext ctx{**gpu, m, sources, memo};
  for (const PlannedDerivation& p : *other_plan) {
    auto r = derive_weight(ctx, p);
    CHECK_MESSAGE(r.code() == ErrorCode::invalid_argument, derivation_name(p.kind()));
  }
  CHECK(derive_weights(ctx, *other_plan).code() == ErrorCode::invalid_argument);

  const PlannedDerivation& transpose = (*plan)[0];
  REQUIRE(transpose.kind() == Derivation::transpose);
  PlannedDerivation edited = transpose;
  edited.launch.src_type = DataType::float16;  // the same weight read as another type
  CHECK(derive_weight(ctx, edited).code() == ErrorCode::invalid_argument);
  edited = transpose;
  edited.launch.rows *= 2;  // past the weight's bytes
  auto past = derive_weight(ctx, edited);
  CHECK(past.code() == ErrorCode::invalid_argument);
  CHECK(past.error().to_string().find("holds 512 bytes, the launch reads 1024") != std::string::npos);
  edited = transpose;
  edited.weight = "scales_a";  // a name this model gives another value
  CHECK(derive_weight(ctx, edited).code() == ErrorCode::invalid_argument);
  const auto nbits =
      std::find_if(plan->begin(), plan->end(), [](auto& p) { return p.kind() == Derivation::dequant_int4; });
  REQUIRE(nbits != plan->end());
  edited = *nbits;
  edited.scales.reset();  // the kind reads scales
  CHECK(derive_weight(ctx, edited).code() == ErrorCode::invalid_argument);
  edited = *nbits;
  edited.scales = transpose.source;  // a weight of another size and role
  CHECK(derive_weight(ctx, edited).code() == ErrorCode::invalid_argument);
  CHECK(memo.is_empty());
  // The model's own entries still derive.
  CHECK(derive_weights(ctx, *plan).ok());
}
