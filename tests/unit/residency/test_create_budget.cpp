// Residency::create() against a budget: what it counts as staying on the
// device for good, per backend capability and per strategy, at the exact
// budget and one byte below it, and which of its two refusals it gives.
// create() reads the capabilities only, so a double that forwards to the
// cpu backend with edited capabilities stands for every kind of device.

#include <ballast/backend_registry.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>
#include <doctest/doctest.h>

#include "support/forwarding.hpp"
#include "support/orphaned_prefix_model.hpp"
#include "unit/onnx/proto_builder.hpp"
#include "unit/store/scratch_dir.hpp"

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

using namespace ballast;

namespace {

class EditedCaps final : public GpuBackend {
 public:
  explicit EditedCaps(GpuBackend& inner) : caps(inner.capabilities()), inner_(inner) {}
  Capabilities caps;

 private:
  const DeviceInfo& do_info() const override { return inner_.info(); }
  const Capabilities& do_capabilities() const override { return caps; }
  Result<BackendRange> do_allocate(std::uint64_t b, std::uint64_t a) override {
    return testing::forwarded(inner_.allocate(b, a));
  }
  Status do_free(const BackendRange& p, std::uint64_t) override { return inner_.free(p.ptr); }
  Status do_copy_to_device(const ResolvedOperand& d, std::span<const std::byte> s) override {
    return inner_.copy_to_device(d.ptr, 0, s);
  }
  Status do_copy_to_host(std::span<std::byte> d, const ResolvedOperand& s) override {
    return inner_.copy_to_host(d, s.ptr, 0);
  }
  Status do_copy_device(const ResolvedOperand& d, const ResolvedOperand& s, std::uint64_t n) override {
    return inner_.copy_device(d.ptr, 0, s.ptr, 0, n);
  }
  Result<BackendRange> do_register_host(const void* h, std::uint64_t b, HostAccess a) override {
    return testing::forwarded(inner_.register_host(h, b, a));
  }
  Status do_unregister_host(const BackendRange& p, std::uint64_t, HostAccess) override {
    return inner_.unregister_host(p.ptr);
  }
  Status do_launch(const DerivationLaunch& l, const DerivationSizes&, const LaunchOperands&) override {
    return inner_.launch(l);
  }
  Status do_synchronize() override { return inner_.synchronize(); }

  GpuBackend& inner_;
};

// Three float32 weights: `aligned` [8, 16] at offset 0 of model.data,
// `misaligned` [8, 16] at offset 514 (not a multiple of 4: a kernel that
// reads whole elements cannot read it in place), `inline_w` [16] in the
// .onnx itself.
constexpr std::uint64_t kMatrix = 8 * 16 * 4;  // 512
constexpr std::uint64_t kInline = 16 * 4;      // 64

// A [8, 16] float32 weight at `offset` of model.data.
testing::Proto external_matrix(const char* name, std::uint64_t offset) {
  using namespace testing::onnx_proto;
  testing::Proto t = tensor(name, 1, {8, 16});
  const std::string off = std::to_string(offset), len = std::to_string(kMatrix);
  external(t, {{"location", "model.data"}, {"offset", off}, {"length", len}});
  return t;
}

// `blob_bytes` of `fill` as model.data, `m` as model.onnx, loaded.
Model write_and_load(const std::filesystem::path& dir, std::size_t blob_bytes, char fill, const testing::Proto& m) {
  std::vector<char> blob(blob_bytes, fill);
  std::ofstream(dir / "model.data", std::ios::binary).write(blob.data(), static_cast<std::streamsize>(blob.size()));
  std::ofstream(dir / "model.onnx", std::ios::binary)
      .write(reinterpret_cast<const char*>(m.data.data()), static_cast<std::streamsize>(m.data.size()));
  auto loaded = load_onnx(dir / "model.onnx");
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  return std::move(*loaded);
}

Model footprint_model(const std::filesystem::path& dir) {
  using namespace testing::onnx_proto;
  testing::Proto inline_w = tensor("inline_w", 1, {16});
  raw_data(inline_w, std::vector<std::uint8_t>(kInline, 0x22));
  return write_and_load(dir, 1040, 0x11,
                        model(graph({node("MatMul", {"X", "aligned"}, {"a"}),
                                     node("MatMul", {"X", "misaligned"}, {"b"}), node("Mul", {"X", "inline_w"}, {"c"})},
                                    {external_matrix("aligned", 0), external_matrix("misaligned", 514), inline_w})));
}

ValueId id_of(const Model& m, std::string_view name) {
  for (const auto& [id, w] : m.store().weights())
    if (m.value_name(id) == name) return id;
  FAIL("no weight " << name);
  return ValueId{0};
}

// create() at `kept` bytes must pass, at one byte less refuse by naming
// exactly `kept` bytes that stay.
void check_kept(GpuBackend& gpu, const Model& m, ResidencyOptions o, std::uint64_t kept) {
  o.budget_bytes = kept - 1;
  auto refused = Residency::create(gpu, m, o);
  REQUIRE(refused.code() == ErrorCode::invalid_argument);
  const std::string text = refused.error().message;
  CHECK_MESSAGE(text.find("below the " + std::to_string(kept) + " bytes that stay on the device once placed") !=
                    std::string::npos,
                text);
  CHECK_MESSAGE(text.find("nothing is paged, so everything placed stays") != std::string::npos, text);
  o.budget_bytes = kept;
  auto r = Residency::create(gpu, m, o);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  CHECK((*r)->release(gpu).status.ok());
}

}  // namespace

TEST_CASE("create(): zero_copy counts the weights a backend cannot read in place, per capability") {
  auto cpu = open_backend("cpu");
  REQUIRE(cpu.ok());
  testing::ScratchDir dir("residency-create-budget");
  const Model m = footprint_model(dir.path());
  EditedCaps gpu(**cpu);
  ResidencyOptions o;
  o.strategy = ResidencyStrategy::zero_copy;
  o.derivations = std::vector<PlannedDerivation>{};  // the weights alone

  SUBCASE("registers, guarded, whole elements: the inline and the misaligned weights are uploaded") {
    gpu.caps.host_registration = true;
    gpu.caps.guarded_host_reads = true;
    gpu.caps.unaligned_operands = false;
    check_kept(gpu, m, o, kInline + kMatrix);
  }
  SUBCASE("registers and reads at any address: only the inline weight") {
    gpu.caps.host_registration = true;
    gpu.caps.guarded_host_reads = true;
    gpu.caps.unaligned_operands = true;
    check_kept(gpu, m, o, kInline);
  }
  SUBCASE("no registration: every weight is uploaded") {
    gpu.caps.host_registration = false;
    gpu.caps.guarded_host_reads = true;
    gpu.caps.unaligned_operands = true;
    check_kept(gpu, m, o, kInline + 2 * kMatrix);
  }
  SUBCASE("registers without a guard: uploaded unless the engine asks for unguarded registrations") {
    gpu.caps.host_registration = true;
    gpu.caps.guarded_host_reads = false;
    gpu.caps.unaligned_operands = true;
    check_kept(gpu, m, o, kInline + 2 * kMatrix);
    o.register_unguarded = true;
    check_kept(gpu, m, o, kInline);
  }
}

TEST_CASE("create(): the refusal names what stays when nothing is paged, the largest pin beside it otherwise") {
  using test_models::OrphanedPrefixModel;
  auto cpu = open_backend("cpu");
  REQUIRE(cpu.ok());
  testing::ScratchDir dir("residency-create-refusals");
  const auto files = OrphanedPrefixModel::write(dir.path());
  auto loaded = load_onnx(files.onnx);
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().to_string());
  const Model& m = *loaded;
  const ValueId w0 = id_of(m, "w0"), w2 = id_of(m, "w2");
  ResidencyOptions o;
  o.derivations = std::vector<PlannedDerivation>{};

  // Nothing paged, w0 uploaded and the rest registered in place: what stays
  // (w0) is exactly the largest pin (w0), and the footprint is the reason.
  o.strategy = ResidencyStrategy::zero_copy;
  o.overrides = {{w0, ResidencyStrategy::upload}};
  check_kept(**cpu, m, o, OrphanedPrefixModel::kW0Bytes);

  // w2 paged beside w0 kept: the largest pin (w0's 24576 bytes, as much as
  // what stays) must fit beside what stays, and the refusal says so.
  o.strategy = ResidencyStrategy::paged;
  o.overrides = {{w0, ResidencyStrategy::upload}, {w2, ResidencyStrategy::paged}};
  const std::uint64_t needed = 2 * OrphanedPrefixModel::kW0Bytes;
  o.budget_bytes = needed - 1;
  auto refused = Residency::create(**cpu, m, o);
  REQUIRE(refused.code() == ErrorCode::invalid_argument);
  const std::string text = refused.error().message;
  CHECK_MESSAGE(text.find("below the 24576 bytes that weight 'w0' needs on the device at once") != std::string::npos,
                text);
  CHECK_MESSAGE(text.find("beside the 24576 bytes that stay on the device once placed") != std::string::npos, text);
  CHECK(text.find("nothing is paged") == std::string::npos);
  o.budget_bytes = needed;
  auto r = Residency::create(**cpu, m, o);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  CHECK((*r)->release(**cpu).status.ok());
}

TEST_CASE("create(): a derived value too large for the budget is named with the node it was planned for") {
  auto cpu = open_backend("cpu");
  REQUIRE(cpu.ok());
  testing::ScratchDir dir("residency-create-node");
  const Model m = footprint_model(dir.path());
  ResidencyOptions o;
  o.strategy = ResidencyStrategy::paged;
  // The transpose of `aligned` and its source (2 x 512 bytes) are the largest pin.
  o.budget_bytes = 2 * kMatrix - 1;
  auto refused = Residency::create(**cpu, m, o);
  REQUIRE(refused.code() == ErrorCode::invalid_argument);
  const std::string text = refused.error().message;
  CHECK_MESSAGE(text.find("bytes that transpose of 'aligned' for node 'MatMul_node' needs on the device at once") !=
                    std::string::npos,
                text);
}

namespace {

// `a` and `b` name the same bytes (tied, offset 0 of model.data), `c` and
// `d` other bytes; all [8, 16] float32.
Model tied_model(const std::filesystem::path& dir) {
  using namespace testing::onnx_proto;
  return write_and_load(dir, 3 * kMatrix, 0x33,
                        model(graph({node("Add", {"X", "a"}, {"ya"}), node("Add", {"X", "b"}, {"yb"}),
                                     node("Add", {"X", "c"}, {"yc"}), node("Add", {"X", "d"}, {"yd"})},
                                    {external_matrix("a", 0), external_matrix("b", 0), external_matrix("c", kMatrix),
                                     external_matrix("d", 2 * kMatrix)})));
}

}  // namespace

TEST_CASE("tied names, one uploaded and one paged: their one entry stays, whichever name reaches it first") {
  // The entry of bytes that an uploaded name keeps is never evicted, also
  // when a paged name of the same bytes made it: evictability is the
  // bytes', decided at create(), not the first caller's.
  auto cpu = open_backend("cpu");
  REQUIRE(cpu.ok());
  testing::ScratchDir dir("residency-tied-overrides");
  const Model m = tied_model(dir.path());
  for (const char* first : {"a", "b"}) {
    CAPTURE(first);
    const char* second = std::string_view(first) == "a" ? "b" : "a";
    ResidencyOptions o;
    o.derivations = std::vector<PlannedDerivation>{};
    o.strategy = ResidencyStrategy::paged;
    o.overrides = {{id_of(m, "a"), ResidencyStrategy::upload}};
    // What stays (the tied bytes, once) beside the largest paged pin.
    o.budget_bytes = 2 * kMatrix - 1;
    CHECK(Residency::create(**cpu, m, o).code() == ErrorCode::invalid_argument);
    o.budget_bytes = 2 * kMatrix;
    auto r = Residency::create(**cpu, m, o);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    Residency& res = **r;
    REQUIRE(res.pin(first).ok());
    REQUIRE(res.pin(second).ok());
    ResidencyStats s = res.stats();
    CHECK(s.uploaded_bytes == kMatrix);  // an upload, counted once, never a page-in
    CHECK(s.page_ins == 0);
    // c then d through the one paged slot: c is evicted, the tied entry stays.
    REQUIRE(res.pin("c").ok());
    REQUIRE(res.pin("d").ok());
    s = res.stats();
    CHECK(s.source_evictions == 1);
    CHECK(s.page_ins == 2);
    REQUIRE(res.pin(first).ok());
    REQUIRE(res.pin(second).ok());
    CHECK(res.stats().page_ins == 2);
    CHECK(res.release(**cpu).status.ok());
  }
}

TEST_CASE("load(): tied zero_copy names are one value, registered and counted once") {
  auto cpu = open_backend("cpu");
  REQUIRE(cpu.ok());
  testing::ScratchDir dir("residency-tied-zero-copy");
  const Model m = tied_model(dir.path());
  ResidencyOptions o;
  o.derivations = std::vector<PlannedDerivation>{};
  o.strategy = ResidencyStrategy::zero_copy;
  auto r = Residency::create(**cpu, m, o);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  auto report = (*r)->load();
  REQUIRE_MESSAGE(report.ok(), report.error().to_string());
  CHECK(report->zero_copy_weights + report->zero_copy_uploads == 3);  // a and b, c, d
  for (const char* name : {"a", "b", "c", "d"}) CHECK((*r)->pin(name).ok());
  CHECK((*r)->release(**cpu).status.ok());
}
