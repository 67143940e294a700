// DeviceWeights against the real CPU backend (whose registration is the
// identity, so zero-copy is observable as pointer equality) and against
// wrappers that lack or refuse registration (so the upload fallback is).
#include "store/store_access.hpp"
#include "support/fault_injecting_backend.hpp"
#include "support/forwarding.hpp"
#include <ballast/backend_registry.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/log.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>
#include <doctest/doctest.h>

#include "support/orphaned_prefix_model.hpp"
#include "unit/store/scratch_dir.hpp"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

using namespace ballast;
namespace fs = std::filesystem;

namespace {

// Forwards everything to a real backend; registration can be switched off
// (capability absent) or made to fail (capability present, call refused).
class Wrapper final : public GpuBackend {
 public:
  enum class Mode { no_capability, refuse, no_read_only };
  Wrapper(GpuBackend& inner, Mode mode) : inner_(inner), mode_(mode), caps_(inner.capabilities()) {
    if (mode == Mode::no_capability) {
      caps_.host_registration = false;
      caps_.host_registration_note = "test double without registration";
    }
    if (mode == Mode::no_read_only) {  // NVIDIA's Vulkan driver: registers, but not write-protected pages
      caps_.read_only_registration = false;
      caps_.host_registration_note = "test double without read-only registration";
    }
  }
  int register_calls = 0;

 private:
  const DeviceInfo& do_info() const override { return inner_.info(); }
  const Capabilities& do_capabilities() const override { return caps_; }
  Result<BackendRange> do_allocate(std::uint64_t b, std::uint64_t a) override { return ::ballast::testing::forwarded(inner_.allocate(b, a)); }
  Status do_free(const BackendRange& p_in, std::uint64_t) override { const DevicePtr p = p_in.ptr; return inner_.free(p); }
  Status do_copy_to_device(const ResolvedOperand& d_in, std::span<const std::byte> s) override { const DevicePtr d = d_in.ptr; return inner_.copy_to_device(d, 0, s); }
  Status do_copy_to_host(std::span<std::byte> d, const ResolvedOperand& s_in) override { const DevicePtr s = s_in.ptr; return inner_.copy_to_host(d, s, 0); }
  Status do_copy_device(const ResolvedOperand& d_in, const ResolvedOperand& s_in, std::uint64_t n) override { const DevicePtr d = d_in.ptr, s = s_in.ptr; return inner_.copy_device(d, 0, s, 0, n); }
  Result<BackendRange> do_register_host(const void*, std::uint64_t, HostAccess) override {
    register_calls += 1;
    Error e = make_error(mode_ == Mode::refuse ? ErrorCode::device_error : ErrorCode::unsupported, "registration refused");
    e.native = "TEST_REGISTRATION_REFUSED";
    return e;
  }
  Status do_unregister_host(const BackendRange& p_in, std::uint64_t, HostAccess) override { const DevicePtr p = p_in.ptr; return inner_.unregister_host(p); }
  Status do_launch(const DerivationLaunch& l, const DerivationSizes&, const LaunchOperands&) override { return inner_.launch(l); }
  Status do_synchronize() override { return inner_.synchronize(); }

  GpuBackend& inner_;
  Mode mode_;
  Capabilities caps_;
};

struct Fixture {
  fs::path dir;
  WeightStore store;
  std::vector<std::byte> file_bytes;
  std::shared_ptr<std::vector<std::byte>> inline_bytes;
  ValueId head{0}, straddle{1}, inline_id{2};
  MappingId mapping_id = 0;

  Fixture() {
    dir = fs::temp_directory_path() / ("ballast_device_weights_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    file_bytes.resize(3 * 4096 + 17);
    for (std::size_t i = 0; i < file_bytes.size(); ++i) file_bytes[i] = static_cast<std::byte>((i * 131 + 7) & 0xff);
    std::ofstream(dir / "w.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(file_bytes.data()), static_cast<std::streamsize>(file_bytes.size()));
    auto mapping = store.map_external(dir / "w.bin");
    REQUIRE(mapping.ok());
    mapping_id = *mapping;
    REQUIRE(store.add(head, external(0, 64)).ok());
    // Straddles the middle of the mapping, across a page boundary.
    REQUIRE(store.add(straddle, external(file_bytes.size() / 2 - 1000, 2000)).ok());
    inline_bytes = std::make_shared<std::vector<std::byte>>(96);
    std::iota(reinterpret_cast<unsigned char*>(inline_bytes->data()),
              reinterpret_cast<unsigned char*>(inline_bytes->data()) + inline_bytes->size(), 1);
    WeightRef in;
    in.dtype = DataType::uint8;
    in.dims = {96};
    in.storage = WeightRef::Storage::inline_owned;
    in.owned = inline_bytes;
    in.inline_bytes = Bytes(inline_bytes->data(), inline_bytes->size());
    REQUIRE(store.add(inline_id, in).ok());
  }
  ~Fixture() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  WeightRef external(std::uint64_t offset, std::uint64_t length) {
    WeightRef w;
    w.dtype = DataType::uint8;
    w.dims = {static_cast<std::int64_t>(length)};
    w.storage = WeightRef::Storage::external;
    ExternalLocation loc;
    loc.file = std::make_shared<const ExternalFile>(ExternalFile{"w.bin", fs::canonical(dir / "w.bin")});
    loc.offset = offset;
    loc.length = length;
    w.external = loc;
    return w;
  }

  std::vector<std::byte> read_back(GpuBackend& gpu, DevicePtr ptr, std::size_t n) {
    std::vector<std::byte> out(n);
    REQUIRE(gpu.copy_to_host(out, ptr, 0).ok());
    return out;
  }
  std::vector<std::byte> expected(ValueId id) {
    auto b = store.bytes(store.weights().at(id));
    REQUIRE(b.has_value());
    return {b->begin(), b->end()};
  }
};

}  // namespace

TEST_CASE("external weights are registered once, referenced bytes only, and read in place; inline weights are uploaded") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  GpuBackend& g = **gpu;
  const AllocationCounters before = g.counters();
  Fixture f;
  {
    DeviceWeights dw(g, f.store);
    auto a = dw.resolve(f.head);
    auto b = dw.resolve(f.straddle);
    auto c = dw.resolve(f.inline_id);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    REQUIRE(c.ok());
    // CPU registration is the identity: the device pointer IS the mapped byte.
    auto whole = f.store.mmap_full_bytes(f.mapping_id);
    REQUIRE(whole.has_value());
    CHECK(*a == reinterpret_cast<DevicePtr>(whole->data()));
    CHECK(*b == reinterpret_cast<DevicePtr>(whole->data()) + f.file_bytes.size() / 2 - 1000);
    CHECK(*c != reinterpret_cast<DevicePtr>(f.inline_bytes->data()));
    CHECK(f.read_back(g, *b, 2000) == f.expected(f.straddle));
    CHECK(f.read_back(g, *c, 96) == f.expected(f.inline_id));
    CHECK(dw.resolve(f.head).value() == *a);  // memoized

    const WeightResidency r = dw.residency();
    CHECK(r.registered_files == 1);
    // The hull of the referenced bytes [0, 64) and the straddling weight,
    // not the whole file (the tail after it is dead). CPU import alignment 1.
    CHECK(r.registered_ranges == 1);
    CHECK(r.registered_bytes == f.file_bytes.size() / 2 + 1000);
    CHECK(r.referenced_bytes == 64 + 2000);
    CHECK(r.mapped_bytes == f.file_bytes.size());
    CHECK(r.uploaded_weights == 1);
    CHECK(r.uploaded_bytes == 96);
    CHECK(r.fallback_files == 0);
    CHECK(g.counters().live_registrations == before.live_registrations + 1);

    Released first = dw.release(g);
    CHECK(first.status.ok());
    CHECK(first.bytes_freed == 96);
    CHECK(first.allocations_freed == 1);
    Released second = dw.release(g);
    CHECK(second.status.ok());
    CHECK(second.allocations_freed == 0);
  }
  CHECK(g.counters().live_allocations == before.live_allocations);
  CHECK(g.counters().live_registrations == before.live_registrations);
}

TEST_CASE("two DeviceWeights over one mapping whose ranges share a start each end their own registration") {
  // On the CPU a registration's pointer is the host address, so two
  // owners registering from the same byte get the same pointer. One that
  // splits at the dead gap registers [0, 64); one that does not, the hull
  // [0, straddle end). Ending the first by its pointer alone ended the
  // most recent registration there, the second's: its straddling weight,
  // still handed out, was then "not inside any live ... host registration".
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  GpuBackend& g = **gpu;
  const AllocationCounters before = g.counters();
  Fixture f;
  {
    DeviceWeightsOptions split;
    split.split_gap_bytes = 4096;
    DeviceWeights small(g, f.store, split, "split at the gap");
    DeviceWeights hull(g, f.store, "the hull");
    REQUIRE(small.resolve(f.head).ok());
    REQUIRE(small.resolve(f.straddle).ok());
    auto head = hull.resolve(f.head);
    auto straddle = hull.resolve(f.straddle);
    REQUIRE(head.ok());
    REQUIRE(straddle.ok());
    CHECK(small.residency().registered_ranges == 2);
    CHECK(hull.residency().registered_ranges == 1);
    CHECK(small.resolve(f.head).value() == *head);  // one start, two registrations
    CHECK(g.counters().live_registrations == before.live_registrations + 3);
    CHECK(small.release(g).status.ok());  // released first: not last-in, first-out
    CHECK(f.read_back(g, *straddle, 2000) == f.expected(f.straddle));
    CHECK(f.read_back(g, *head, 64) == f.expected(f.head));
    CHECK(g.counters().live_registrations == before.live_registrations + 1);
    CHECK(hull.release(g).status.ok());
  }
  CHECK(g.counters().live_registrations == before.live_registrations);
}

TEST_CASE("a failed free of an inline weight's upload names the weight by its value id") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  testing::FaultInjectingBackend faulty(**gpu);
  Fixture f;
  {
    DeviceWeights dw(faulty, f.store);
    REQUIRE(dw.resolve(f.inline_id).ok());
    faulty.fail_nth(testing::FaultOp::free, 1);
    const Released r = dw.release(faulty);
    REQUIRE_FALSE(r.status.ok());
    CHECK(r.failed_frees == 1);
    const std::string text = r.status.to_string();
    CAPTURE(text);
    CHECK(text.find("freeing the 96-byte upload of the inline weight with value id " +
                    std::to_string(f.inline_id.index)) != std::string::npos);
    faulty.disarm();
    for (DevicePtr p : faulty.kept_allocations()) CHECK(faulty.free(p).ok());
  }
}

TEST_CASE("several failed frees: the first is the error, and the others are counted after it") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  Wrapper w(**gpu, Wrapper::Mode::no_capability);  // every weight uploaded: one free each
  testing::FaultInjectingBackend faulty(w);
  Fixture f;
  struct Case {
    std::vector<ValueId> ids;
    const char* more;  // nullptr: no count at all
  };
  const Case cases[] = {{{f.head}, nullptr},
                        {{f.head, f.straddle}, " (and 1 more refused free)"},
                        {{f.head, f.straddle, f.inline_id}, " (and 2 more refused frees)"}};
  for (const Case& c : cases) {
    CAPTURE(c.ids.size());
    DeviceWeights dw(faulty, f.store);
    for (ValueId id : c.ids) REQUIRE(dw.resolve(id).ok());
    faulty.fail_nth(testing::FaultOp::free, 1, testing::FaultInjectingBackend::Fault::op_from_then_on);
    const Released r = dw.release(faulty);
    REQUIRE_FALSE(r.status.ok());
    CHECK(r.failed_frees == c.ids.size());
    const std::string text = r.status.to_string();
    CAPTURE(text);
    if (c.more != nullptr)
      CHECK(text.find(c.more) != std::string::npos);
    else
      CHECK(text.find("more refused free") == std::string::npos);
    faulty.disarm();
    for (DevicePtr p : faulty.kept_allocations()) CHECK(faulty.free(p).ok());
  }
}

TEST_CASE("without registration every weight is uploaded, and the fallback says why") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  std::vector<std::string> logged;  // fallbacks reach the engine's log sink, not stderr
  set_log_sink([&](const LogMessage& m) {
    logged.push_back(std::string(log_level_name(m.level)) + " " + std::string(m.source) + ": " + std::string(m.text));
  });
  for (auto mode : {Wrapper::Mode::no_capability, Wrapper::Mode::refuse, Wrapper::Mode::no_read_only}) {
    logged.clear();
    Wrapper w(**gpu, mode);
    Fixture f;
    const AllocationCounters before = w.counters();
    DeviceWeights dw(w, f.store);
    auto b = dw.resolve(f.straddle);
    REQUIRE(b.ok());
    CHECK(f.read_back(w, *b, 2000) == f.expected(f.straddle));
    REQUIRE(dw.resolve(f.head).ok());
    const WeightResidency r = dw.residency();
    CHECK(r.registered_files == 0);
    CHECK(r.uploaded_weights == 2);
    CHECK(r.host_copy_bytes == 0);  // sent to the backend straight from the mapping
    CHECK(r.fallback_files == 1);
    if (mode == Wrapper::Mode::no_capability) {
      CHECK(r.fallback_reason.find("test double without registration") != std::string::npos);
    } else if (mode == Wrapper::Mode::no_read_only) {
      // The mappings are read-only: the backend is not even asked.
      CHECK(w.register_calls == 0);
      CHECK(r.fallback_reason.find("cannot register read-only host memory") != std::string::npos);
    } else {
      CHECK(r.fallback_reason.find("TEST_REGISTRATION_REFUSED") != std::string::npos);
    }
    REQUIRE(logged.size() == 1);  // once per mapping, not per weight
    CHECK(logged[0].rfind("warning device weights: uploading the weights of ", 0) == 0);
    CHECK(logged[0].find(r.fallback_reason) != std::string::npos);
    CHECK(dw.release(w).status.ok());
    CHECK(w.counters().live_allocations == before.live_allocations);
  }
  set_log_sink({});
}

TEST_CASE("an unknown weight or an out-of-bounds range is an error, not a crash") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  Fixture f;
  // add() refuses a range past the end of its file; only the loader's way
  // in can store one (as a file truncated after the check would leave it).
  CHECK(f.store.add(ValueId{9}, f.external(f.file_bytes.size() - 10, 20)).code() == ErrorCode::out_of_bounds);
  store::StoreAccess::weights(f.store)[ValueId{9}] = f.external(f.file_bytes.size() - 10, 20);
  DeviceWeights dw(**gpu, f.store);
  CHECK(dw.resolve(ValueId{42}).code() == ErrorCode::not_found);
  auto oob = dw.resolve(ValueId{9});
  CHECK(oob.code() == ErrorCode::out_of_bounds);
  CHECK(oob.error().file.find("w.bin") != std::string::npos);
  CHECK(dw.release(**gpu).status.ok());
}

// A float32 weight at an offset that is not a multiple of 4.
static void add_misaligned(Fixture& f, ValueId id) {
  WeightRef odd = f.external(4096 + 2, 64);
  odd.dtype = DataType::float32;
  odd.dims = {16};
  REQUIRE(f.store.add(id, odd).ok());
}

TEST_CASE("a registered file's weight at an offset its kernels cannot read in place is uploaded") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  Fixture f;
  add_misaligned(f, ValueId{7});
  DeviceWeights dw(**gpu, f.store);
  auto whole = f.store.mmap_full_bytes(f.mapping_id);
  REQUIRE(whole.has_value());
  auto aligned = dw.resolve(f.head);
  auto moved = dw.resolve(ValueId{7});
  REQUIRE(aligned.ok());
  REQUIRE(moved.ok());
  CHECK(*aligned == reinterpret_cast<DevicePtr>(whole->data()));
  CHECK(*moved % 4 == 0);
  CHECK(f.read_back(**gpu, *moved, 64) == f.expected(ValueId{7}));
  const WeightResidency r = dw.residency();
  CHECK(r.registered_files == 1);
  CHECK(r.misaligned_uploads == 1);
  CHECK(r.uploaded_weights == 1);
  CHECK(dw.release(**gpu).status.ok());
}

TEST_CASE("resolve_in_place: the in-place pointer, or nullopt where resolve() would upload, with nothing uploaded") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  Fixture f;
  add_misaligned(f, ValueId{7});
  DeviceWeights dw(**gpu, f.store);
  const AllocationCounters before = (*gpu)->counters();
  auto head = dw.resolve_in_place(f.head);
  REQUIRE(head.ok());
  REQUIRE(head->has_value());
  for (int i = 0; i < 2; ++i) {  // asked twice, counted once
    auto moved = dw.resolve_in_place(ValueId{7});
    REQUIRE(moved.ok());
    CHECK(!moved->has_value());
  }
  CHECK((*gpu)->counters().live_allocations == before.live_allocations);
  CHECK(dw.residency().misaligned_uploads == 1);
  CHECK(dw.residency().uploaded_weights == 0);
  CHECK(**head == *dw.resolve(f.head));
  // resolve() still uploads it; in place it still is not.
  REQUIRE(dw.resolve(ValueId{7}).ok());
  CHECK(dw.residency().misaligned_uploads == 1);
  CHECK(dw.residency().uploaded_weights == 1);
  auto again = dw.resolve_in_place(ValueId{7});
  REQUIRE(again.ok());
  CHECK(!again->has_value());
  CHECK(dw.release(**gpu).status.ok());

  // Without registration nothing is in place, and the fallback is reported.
  Wrapper w(**gpu, Wrapper::Mode::no_capability);
  DeviceWeights none(w, f.store);
  auto straddle = none.resolve_in_place(f.straddle);
  REQUIRE(straddle.ok());
  CHECK(!straddle->has_value());
  CHECK(none.residency().fallback_files == 1);
  CHECK(none.residency().uploaded_weights == 0);
  CHECK(none.release(w).status.ok());
}

TEST_CASE("Residency zero_copy: a backend known not to register is refused a budget below the uploads at create()") {
  using test_models::OrphanedPrefixModel;
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  Wrapper w(**gpu, Wrapper::Mode::no_capability);
  testing::ScratchDir dir("zero-copy-no-capability-budget");
  const auto files = OrphanedPrefixModel::write(dir.path());
  auto model = load_onnx(files.onnx);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  ResidencyOptions o;
  o.strategy = ResidencyStrategy::zero_copy;
  o.budget_bytes = OrphanedPrefixModel::kW0Bytes + OrphanedPrefixModel::kW1Bytes;
  o.derivations = std::vector<PlannedDerivation>{};
  // Every weight will be uploaded and none is ever evicted: the budget
  // must hold them all, known before the first pin.
  auto refused = Residency::create(w, *model, o);
  REQUIRE(refused.code() == ErrorCode::invalid_argument);
  CHECK_MESSAGE(refused.error().message.find("stay on the device once placed") != std::string::npos,
                refused.error().to_string());
  std::uint64_t all = 0;
  for (const auto& [id, weight] : model->store().weights()) all += weight.byte_length();
  o.budget_bytes = all;
  auto r = Residency::create(w, *model, o);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  for (const auto& [id, weight] : model->store().weights()) CHECK((*r)->pin(id).ok());
  CHECK((*r)->stats().peak_device_bytes <= all);
  CHECK((*r)->release(w).status.ok());
}

TEST_CASE(
    "Residency zero_copy: a weight the backend refuses to register is uploaded under the budget, never beside it") {
  using test_models::OrphanedPrefixModel;
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  Wrapper w(**gpu, Wrapper::Mode::refuse);  // says it registers, then refuses: found only at the first pin
  testing::ScratchDir dir("zero-copy-fallback-budget");
  const auto files = OrphanedPrefixModel::write(dir.path());
  auto model = load_onnx(files.onnx);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const AllocationCounters before = w.counters();
  ResidencyOptions o;
  o.strategy = ResidencyStrategy::zero_copy;
  o.budget_bytes = OrphanedPrefixModel::kW0Bytes + OrphanedPrefixModel::kW1Bytes;
  o.derivations = std::vector<PlannedDerivation>{};
  auto r = Residency::create(w, *model, o);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  Residency& residency = **r;
  const ValueId w0 = *model->value_id("w0");
  CHECK(residency.strategy_of(w0) == ResidencyStrategy::zero_copy);  // not yet known
  auto p0 = residency.pin("w0");
  REQUIRE_MESSAGE(p0.ok(), p0.error().to_string());
  CHECK(residency.strategy_of(w0) == ResidencyStrategy::upload);
  CHECK(residency.stats().device_bytes == OrphanedPrefixModel::kW0Bytes);
  auto p1 = residency.pin("w1");
  REQUIRE(p1.ok());
  // The budget is full of pins: the third is refused, never an overshoot.
  auto p2 = residency.pin("w2");
  REQUIRE(!p2.ok());
  CHECK(p2.error().code == ErrorCode::out_of_memory);
  const ResidencyStats s = residency.stats();
  CHECK(s.device_bytes == o.budget_bytes);
  CHECK(s.peak_device_bytes <= *o.budget_bytes);
  CHECK(s.uploaded_bytes == *o.budget_bytes);
  CHECK(residency.registrations().uploaded_weights == 0);
  CHECK(residency.registrations().fallback_files == 1);
  // Read back: the bytes of w0 as the file holds them.
  std::vector<std::byte> got(OrphanedPrefixModel::kW0Bytes);
  REQUIRE(w.copy_to_host(got, p0->first(), 0).ok());
  auto want = model->store().bytes(model->store().weights().at(w0));
  REQUIRE(want.has_value());
  CHECK(std::memcmp(got.data(), want->data(), got.size()) == 0);
  p0->reset();
  p1->reset();
  CHECK(residency.release(w).status.ok());
  CHECK(w.counters().live_allocations == before.live_allocations);

  // load() the same: what fits is uploaded, the rest left for demand.
  auto again = Residency::create(w, *model, o);
  REQUIRE(again.ok());
  auto report = (*again)->load();
  REQUIRE_MESSAGE(report.ok(), report.error().to_string());
  CHECK(report->zero_copy_weights == 0);
  CHECK(report->zero_copy_uploads == 2);
  CHECK(report->left_for_demand == 1);
  CHECK(report->left_bytes == OrphanedPrefixModel::kW2Bytes);
  CHECK((*again)->stats().device_bytes == *o.budget_bytes);
  CHECK((*again)->release(w).status.ok());
  CHECK(w.counters().live_allocations == before.live_allocations);
}

TEST_CASE("release on another backend than the one made on is refused whole: nothing freed, nothing forgotten") {
  // Two opens of cpu: the same device, two GpuBackends, each with its own
  // record of live ranges. Freed on the other one, every upload would be
  // refused and then dropped from the lists: lost until the backend closes
  // (and on devices that hand out the same addresses, another's freed).
  auto own = open_backend("cpu");
  auto other = open_backend("cpu");
  REQUIRE(own.ok());
  REQUIRE(other.ok());
  GpuBackend& g = **own;
  const AllocationCounters before = g.counters();
  Fixture f;
  {
    DeviceWeights dw(g, f.store);
    REQUIRE(dw.resolve(f.head).ok());
    REQUIRE(dw.resolve(f.inline_id).ok());
    const AllocationCounters held = g.counters();
    const Released wrong = dw.release(**other);
    REQUIRE_FALSE(wrong.status.ok());
    CHECK(wrong.status.error().code == ErrorCode::invalid_argument);
    CHECK_MESSAGE(wrong.status.error().message.find("not on the backend it was made on") != std::string::npos,
                  wrong.status.error().to_string());
    CHECK(wrong.bytes_freed == 0);
    CHECK(wrong.failed_frees == 0);
    CHECK(g.counters().live_allocations == held.live_allocations);
    CHECK(g.counters().live_registrations == held.live_registrations);
    CHECK(dw.residency().uploaded_weights == 1);  // still its own
    const Released right = dw.release(g);
    CHECK(right.status.ok());
    CHECK(right.bytes_freed == 96);
  }
  CHECK(g.counters().live_allocations == before.live_allocations);
  CHECK(g.counters().live_registrations == before.live_registrations);

  using test_models::OrphanedPrefixModel;
  testing::ScratchDir dir("release-on-another-backend");
  const auto files = OrphanedPrefixModel::write(dir.path());
  auto model = load_onnx(files.onnx);
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  for (auto strategy : {ResidencyStrategy::upload, ResidencyStrategy::zero_copy, ResidencyStrategy::paged}) {
    CAPTURE(static_cast<int>(strategy));
    ResidencyOptions o;
    o.strategy = strategy;
    o.derivations = std::vector<PlannedDerivation>{};
    auto r = Residency::create(g, *model, o);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    for (const auto& [id, weight] : model->store().weights()) REQUIRE((*r)->pin(id).ok());
    const AllocationCounters held = g.counters();
    const Released wrong = (*r)->release(**other);
    REQUIRE_FALSE(wrong.status.ok());
    CHECK(wrong.status.error().code == ErrorCode::invalid_argument);
    CHECK(wrong.bytes_freed == 0);
    CHECK(g.counters().live_allocations == held.live_allocations);
    CHECK(g.counters().live_registrations == held.live_registrations);
    for (const auto& [id, weight] : model->store().weights()) CHECK((*r)->pin(id).ok());  // still usable
    CHECK((*r)->release(g).status.ok());
    CHECK(g.counters().live_allocations == before.live_allocations);
    CHECK(g.counters().live_registrations == before.live_registrations);
  }
}
