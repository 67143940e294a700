// DeviceWeights on the backend under test: a registered file, an upload,
// and the destructor backstop (an engine that forgets release() must not
// leave its registration or uploads live on the device).
#include "conformance/conformance.hpp"

#include <ballast/device_weights.hpp>
#include <ballast/weight_store.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

using namespace ballast;
namespace fs = std::filesystem;

namespace {

// A store over one external data file (float32 weights, so every backend
// reads them in place) plus one inline weight (always uploaded).
struct SmallStore {
  fs::path dir;
  WeightStore store;
  std::vector<std::byte> file_bytes = conformance::random_bytes(3 * 4096, 7);
  std::shared_ptr<std::vector<std::byte>> inline_bytes =
      std::make_shared<std::vector<std::byte>>(conformance::random_bytes(64, 8));
  ValueId head{0}, tail{1}, inline_id{2};

  SmallStore() {
    dir = fs::temp_directory_path() / ("ballast_conformance_dw_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "w.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(file_bytes.data()), static_cast<std::streamsize>(file_bytes.size()));
    REQUIRE(store.map_external(dir / "w.bin").ok());
    REQUIRE(store.add(head, external(0, 1024)).ok());
    REQUIRE(store.add(tail, external(8192, 4096)).ok());
    WeightRef in;
    in.dtype = DataType::float32;
    in.dims = {16};
    in.storage = WeightRef::Storage::inline_owned;
    in.owned = inline_bytes;
    in.inline_bytes = Bytes(inline_bytes->data(), inline_bytes->size());
    REQUIRE(store.add(inline_id, in).ok());
  }
  ~SmallStore() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  WeightRef external(std::uint64_t offset, std::uint64_t length) {
    WeightRef w;
    w.dtype = DataType::float32;
    w.dims = {static_cast<std::int64_t>(length / 4)};
    w.storage = WeightRef::Storage::external;
    ExternalLocation loc;
    loc.file = std::make_shared<const ExternalFile>(ExternalFile{"w.bin", fs::canonical(dir / "w.bin")});
    loc.offset = offset;
    loc.length = length;
    w.external = loc;
    return w;
  }
};

// Makes every weight visible and checks the bytes the device sees.
void resolve_all(DeviceWeights& dw, SmallStore& s) {
  for (ValueId id : {s.head, s.tail, s.inline_id}) {
    auto ptr = dw.resolve(id);
    REQUIRE_MESSAGE(ptr.ok(), conformance::describe(ptr.status()));
    auto expected = s.store.bytes(s.store.weights().at(id));
    REQUIRE(expected.has_value());
    const auto seen = conformance::download(*ptr, expected->size());
    CHECK(std::equal(seen.begin(), seen.end(), expected->begin(), expected->end()));
  }
}

}  // namespace

TEST_CASE("device weights: registered or uploaded, and released on destruction when release() is forgotten") {
  SmallStore s;
  GpuBackend& g = conformance::gpu();
  const AllocationCounters baseline = g.counters();
  {
    DeviceWeights dw(g, s.store);
    resolve_all(dw, s);
    const WeightResidency r = dw.residency();
    CHECK(r.uploaded_weights >= 1);  // the inline weight, at least
    if (g.capabilities().host_registration && g.capabilities().read_only_registration) {
      CHECK(r.registered_files + r.fallback_files == 1);
    }
    const AllocationCounters live = g.counters();
    CHECK(live.live_allocations + live.live_registrations >
          baseline.live_allocations + baseline.live_registrations);
    // No release(): the destructor is the engine's safety net.
  }
  const AllocationCounters after = g.counters();
  CHECK_MESSAGE(after.live_allocations == baseline.live_allocations, "uploads left live by ~DeviceWeights");
  CHECK_MESSAGE(after.live_bytes == baseline.live_bytes, "upload bytes left live by ~DeviceWeights");
  CHECK_MESSAGE(after.live_registrations == baseline.live_registrations, "registrations left live by ~DeviceWeights");
}

TEST_CASE("device weights: release() then destruction frees each thing once") {
  conformance::LeakCheck leaks;
  SmallStore s;
  DeviceWeights dw(conformance::gpu(), s.store);
  resolve_all(dw, s);
  Released first = dw.release(conformance::gpu());
  CHECK_MESSAGE(first.status.ok(), conformance::describe(first.status));
  CHECK(first.failed_frees == 0);
  Released second = dw.release(conformance::gpu());
  CHECK(second.status.ok());
  CHECK(second.allocations_freed == 0);
}

// Issue 12 §3: a data file truncated after it was mapped (a model re-exported
// in place while the engine runs). resolve() must say so; before, it handed
// out a pointer into the dead mapping (registered) or copied from it
// (uploaded), and the process died of SIGBUS. docs/reliability.md.
TEST_CASE("device weights: a data file truncated after mapping is an io error, never SIGBUS") {
  conformance::LeakCheck leaks;
  SmallStore s;
  GpuBackend& g = conformance::gpu();
  DeviceWeights dw(g, s.store);
  auto head = dw.resolve(s.head);  // before the change: fine
  REQUIRE_MESSAGE(head.ok(), conformance::describe(head.status()));
  std::filesystem::resize_file(s.dir / "w.bin", 0);
  for (ValueId id : {s.head, s.tail}) {
    auto r = dw.resolve(id);
    if (id == s.head && r.ok()) {
      // Uploaded before the change: on the device already, nothing reads the file.
      CHECK(dw.residency().registered_files == 0);
      continue;
    }
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == ErrorCode::io);
    CHECK_MESSAGE(r.error().to_string().find("w.bin changed since it was opened (size 12288, now 0)") != std::string::npos,
                  conformance::describe(r.status()));
  }
  auto in = dw.resolve(s.inline_id);  // not in a file: unaffected
  CHECK_MESSAGE(in.ok(), conformance::describe(in.status()));
  Released released = dw.release(g);
  CHECK_MESSAGE(released.status.ok(), conformance::describe(released.status));
}
