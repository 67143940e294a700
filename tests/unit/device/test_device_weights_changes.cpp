// DeviceWeights when a data file changes under its mapping (issue 12 §3):
// resolve() checks the file before it registers or uploads, and again on
// every call for a weight read in place; uploads copy through a host buffer
// under the SIGBUS guard, so a truncation racing them is an io error, not a
// dead process.
#include "support/forwarding.hpp"
#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/onnx_loader.hpp>
#include <ballast/residency.hpp>
#include <doctest/doctest.h>

#include "support/orphaned_prefix_model.hpp"

#include "unit/store/file_change_helpers.hpp"
#include "unit/store/scratch_dir.hpp"

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

using namespace ballast;
using namespace ballast::testing;
namespace fs = std::filesystem;

namespace {

// Forwards every call to a real backend; subclasses change what it says
// it can do.
class Forwarding : public GpuBackend {
 public:
  explicit Forwarding(GpuBackend& inner) : inner_(inner), caps_(inner.capabilities()) {}

 protected:
  const DeviceInfo& do_info() const override { return inner_.info(); }
  const Capabilities& do_capabilities() const override { return caps_; }
  Result<BackendRange> do_allocate(std::uint64_t b, std::uint64_t a) override { return ::ballast::testing::forwarded(inner_.allocate(b, a)); }
  Status do_free(const BackendRange& p_in, std::uint64_t) override { const DevicePtr p = p_in.ptr; return inner_.free(p); }
  Status do_copy_to_device(const ResolvedOperand& d_in, std::span<const std::byte> s) override { const DevicePtr d = d_in.ptr; return inner_.copy_to_device(d, 0, s); }
  Status do_copy_to_host(std::span<std::byte> d, const ResolvedOperand& s_in) override { const DevicePtr s = s_in.ptr; return inner_.copy_to_host(d, s, 0); }
  Status do_copy_device(const ResolvedOperand& d_in, const ResolvedOperand& s_in, std::uint64_t n) override { const DevicePtr d = d_in.ptr, s = s_in.ptr; return inner_.copy_device(d, 0, s, 0, n); }
  Result<BackendRange> do_register_host(const void* h, std::uint64_t n, HostAccess a) override {
    return ::ballast::testing::forwarded(inner_.register_host(h, n, a));
  }
  Status do_unregister_host(const BackendRange& p_in, std::uint64_t, HostAccess) override { const DevicePtr p = p_in.ptr; return inner_.unregister_host(p); }
  Status do_launch(const DerivationLaunch& l, const DerivationSizes&, const LaunchOperands&) override { return inner_.launch(l); }
  Status do_synchronize() override { return inner_.synchronize(); }

  GpuBackend& inner_;
  Capabilities caps_;
};

// Without host registration: every weight is uploaded.
class UploadOnly final : public Forwarding {
 public:
  explicit UploadOnly(GpuBackend& inner) : Forwarding(inner) {
    caps_.host_registration = false;
    caps_.host_registration_note = "test double: uploads only";
  }

 private:
  Result<BackendRange> do_register_host(const void*, std::uint64_t, HostAccess) override {
    return make_error(ErrorCode::unsupported, "test double: uploads only");
  }
};

// Says its reads of registered memory cannot be guarded (as lavapipe's
// worker threads, which block SIGBUS).
class UnguardedReads final : public Forwarding {
 public:
  explicit UnguardedReads(GpuBackend& inner) : Forwarding(inner) { caps_.guarded_host_reads = false; }
};

struct DataFile {
  ScratchDir dir{"device-file-changes"};
  fs::path file;
  std::vector<std::byte> original;
  WeightStore store;
  ValueId head{0}, tail{1};

  explicit DataFile(std::size_t size = 3 * 4096) {
    file = dir / "w.bin";
    original = byte_pattern(size, 4);
    write_file(file, original);
    REQUIRE(store.map_external(file).ok());
    REQUIRE(store.add(head, external_weight(file, 0, 4096)).ok());
    REQUIRE(store.add(tail, external_weight(file, size - 4096, 4096)).ok());
  }
  std::vector<std::byte> read_back(GpuBackend& gpu, DevicePtr p, std::size_t n) {
    std::vector<std::byte> out(n);
    REQUIRE(gpu.copy_to_host(out, p, 0).ok());
    return out;
  }
};

void check_changed(const Result<DevicePtr>& r, const fs::path& file) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.code() == ErrorCode::io);
  CHECK(r.error().file == file.string());
  CHECK_MESSAGE(contains(r.error().to_string(), file.string() + " changed since it was opened (size "),
                r.error().to_string());
}

}  // namespace

TEST_CASE("cpu: a data file truncated after load is an io error from resolve, not SIGBUS on the next read") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  DataFile f;
  DeviceWeights dw(**gpu, f.store);
  auto head = dw.resolve(f.head);  // registered: the device pointer reads the mapping itself
  REQUIRE(head.ok());
  CHECK(f.read_back(**gpu, *head, 4096) == std::vector<std::byte>(f.original.begin(), f.original.begin() + 4096));

  truncate_file(f.file, 100);
  // The measured crash was resolve() then a copy from the pointer: now
  // resolve() refuses, for a weight resolved before and for a new one.
  check_changed(dw.resolve(f.head), f.file);
  check_changed(dw.resolve(f.tail), f.file);
  CHECK(dw.release(**gpu).status.ok());
}

TEST_CASE("cpu without registration: an upload from a truncated file is an io error and frees what it allocated") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  UploadOnly up(**gpu);
  DataFile f;
  const AllocationCounters before = up.counters();
  DeviceWeights dw(up, f.store);
  auto head = dw.resolve(f.head);
  REQUIRE(head.ok());
  truncate_file(f.file, 0);
  // Uploaded already: on the device, independent of the file from now on.
  CHECK(dw.resolve(f.head).value() == *head);
  check_changed(dw.resolve(f.tail), f.file);
  CHECK(up.counters().live_allocations == before.live_allocations + 1);  // the head only
  CHECK(dw.release(up).status.ok());
  CHECK(up.counters().live_allocations == before.live_allocations);
}

TEST_CASE("cpu: truncations racing uploads never kill the process") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  UploadOnly up(**gpu);
  constexpr std::size_t kSize = std::size_t{24} << 20;  // three bounce buffers' worth
  std::mt19937 rng(7);
  int completed = 0, refused = 0;
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    DataFile f(kSize);
    const ValueId whole{2};  // the whole file, beside the fixture's head and tail
    REQUIRE(f.store.add(whole, external_weight(f.file, 0, kSize)).ok());
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 6000)(rng));
    std::atomic<bool> go{false};
    std::thread cutter([&] {
      while (!go.load()) std::this_thread::yield();
      std::this_thread::sleep_for(delay);
      truncate_file(f.file, round % 2 == 0 ? 0 : kSize / 3);
    });
    DeviceWeights dw(up, f.store);
    go.store(true);
    auto r = dw.resolve(whole);
    cutter.join();
    if (r.ok()) {
      ++completed;
      CHECK(f.read_back(up, *r, kSize) == f.original);
    } else {
      ++refused;
      CHECK_MESSAGE(r.code() == ErrorCode::io, r.error().to_string());
    }
    CHECK(dw.release(up).status.ok());
  }
  MESSAGE("uploads completed: " << completed << ", refused: " << refused);
}

TEST_CASE("cpu: a data file replaced by rename keeps serving the old bytes") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  DataFile f;
  replace_file(f.file, byte_pattern(f.original.size(), 9));
  DeviceWeights dw(**gpu, f.store);
  auto tail = dw.resolve(f.tail);
  REQUIRE_MESSAGE(tail.ok(), tail.error().to_string());
  CHECK(f.read_back(**gpu, *tail, 4096) == std::vector<std::byte>(f.original.end() - 4096, f.original.end()));
  UploadOnly up(**gpu);
  DeviceWeights uploaded(up, f.store);
  auto copy = uploaded.resolve(f.tail);
  REQUIRE_MESSAGE(copy.ok(), copy.error().to_string());
  CHECK(f.read_back(up, *copy, 4096) == std::vector<std::byte>(f.original.end() - 4096, f.original.end()));
  CHECK(uploaded.release(up).status.ok());
  CHECK(dw.release(**gpu).status.ok());
}

// Issue 24 §3: the cpu backend's kernels read a zero-copy registration
// directly. A truncation between registering and the kernel (or during it)
// makes the kernel read zeros (the registration is armed), never SIGBUS;
// the mapping is poisoned, so resolve() refuses it even once the file is
// put back exactly as it was.
TEST_CASE("cpu: a kernel over a registered mapping truncated under it reads zeros, and the file stays refused") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  DataFile f;
  DeviceWeights dw(**gpu, f.store);
  auto head = dw.resolve(f.head);
  REQUIRE(head.ok());
  REQUIRE(dw.residency().registered_ranges >= 1);
  struct stat st {};
  REQUIRE(::stat(f.file.c_str(), &st) == 0);

  truncate_file(f.file, 0);
  DerivationLaunch l;
  l.kind = Derivation::transpose;
  l.src_type = DataType::uint8;
  l.rows = 64;
  l.cols = 64;
  l.src = *head;
  auto dst = (*gpu)->allocate(4096);
  REQUIRE(dst.ok());
  l.dst = *dst;
  REQUIRE((*gpu)->launch(l).ok());  // reads the vanished pages: zeros, no signal
  REQUIRE((*gpu)->synchronize().ok());
  CHECK(f.read_back(**gpu, *dst, 4096) == std::vector<std::byte>(4096, std::byte{0}));

  // Put back byte for byte, with the old modification time: still refused.
  {
    const int fd = ::open(f.file.c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, f.original.data(), f.original.size(), 0) == static_cast<ssize_t>(f.original.size()));
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    REQUIRE(::futimens(fd, times) == 0);
    ::close(fd);
  }
  auto again = dw.resolve(f.head);
  REQUIRE_FALSE(again.ok());
  CHECK(again.code() == ErrorCode::io);
  CHECK_MESSAGE(contains(again.error().to_string(), "changed since it was opened"), again.error().to_string());
  CHECK((*gpu)->free(*dst).ok());
  CHECK(dw.release(**gpu).status.ok());
}

TEST_CASE("a backend whose reads of registrations cannot be guarded gets uploads, unless the engine opts in") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  UnguardedReads unguarded(**gpu);
  DataFile f;
  {
    DeviceWeights dw(unguarded, f.store);
    REQUIRE(dw.resolve(f.head).ok());
    const WeightResidency r = dw.residency();
    CHECK(r.registered_files == 0);
    CHECK(r.uploaded_weights == 1);
    CHECK(r.fallback_files == 1);
    CHECK_MESSAGE(contains(r.fallback_reason, "threads that block SIGBUS"), r.fallback_reason);
    CHECK(dw.release(unguarded).status.ok());
  }
  DeviceWeightsOptions opt_in;
  opt_in.register_unguarded = true;
  DeviceWeights dw(unguarded, f.store, opt_in);
  REQUIRE(dw.resolve(f.head).ok());
  CHECK(dw.residency().registered_files == 1);
  CHECK(dw.release(unguarded).status.ok());
}

namespace {

// Truncates a file at its first launch, before the kernel reads: as a
// writer truncating a model file while a derivation runs over its pages.
class TruncatesAtLaunch final : public Forwarding {
 public:
  TruncatesAtLaunch(GpuBackend& inner, fs::path file) : Forwarding(inner), file_(std::move(file)) {}

 private:
  Status do_launch(const DerivationLaunch& l, const DerivationSizes& s, const LaunchOperands& o) override {
    if (!done_) {
      done_ = true;
      truncate_file(file_, 0);
    }
    return Forwarding::do_launch(l, s, o);
  }
  fs::path file_;
  bool done_ = false;
};

}  // namespace

TEST_CASE("cpu: a file truncated while a derivation reads it in place fails the build on every path, keeping nothing") {
  using test_models::OrphanedPrefixModel;
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  enum class Path { one, batch, residency };
  for (Path path : {Path::one, Path::batch, Path::residency}) {
    CAPTURE(static_cast<int>(path));
    ScratchDir dir("truncated-during-build");
    const auto files = OrphanedPrefixModel::write(dir.path());
    auto model = load_onnx(files.onnx);
    REQUIRE_MESSAGE(model.ok(), model.error().to_string());
    auto planned = plan_derivation(*model, "w0", Derivation::transpose);
    REQUIRE(planned.ok());
    TruncatesAtLaunch gpu_(**gpu, files.data);
    const AllocationCounters before = gpu_.counters();
    Status failed;
    if (path == Path::residency) {
      auto r = Residency::create(gpu_, *model, {});  // zero_copy
      REQUIRE(r.ok());
      auto pinned = (*r)->pin(*planned);
      failed = pinned.status();
      CHECK((*r)->stats().device_bytes == 0);  // the output block went back
      CHECK((*r)->stats().derived_builds == 0);
      CHECK((*r)->release(gpu_).status.ok());
    } else {
      DeviceWeights sources(gpu_, model->store());
      DerivedWeights memo;
      const DeriveContext ctx{gpu_, *model, sources, memo};
      if (path == Path::one) {
        failed = derive_weight(ctx, *planned).status();
      } else {
        const PlannedDerivation plan[] = {*planned};
        failed = derive_weights(ctx, plan).status();
      }
      CHECK(memo.is_empty());  // never memoized
      CHECK(memo.release(gpu_).status.ok());
      CHECK(sources.release(gpu_).status.ok());
    }
    REQUIRE_FALSE(failed.ok());
    CHECK(failed.code() == ErrorCode::io);
    CHECK_MESSAGE(contains(failed.to_string(), "changed since it was opened"), failed.to_string());
    CHECK(gpu_.counters().live_allocations == before.live_allocations);
  }
}
