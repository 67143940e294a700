// WeightStore::transfer: a weight's bytes handed straight out of the file
// mapping to a reader ballast does not run (a backend's copy_to_device),
// guarded without a jump: while the range is armed, a page lost to a
// truncation reads as zeros instead of raising SIGBUS, in any thread, and
// the transfer is an io error afterwards.
#include "store/sigbus_guard.hpp"
#include "unit/store/file_change_helpers.hpp"
#include "unit/store/scratch_dir.hpp"
#include "unit/store/sigbus_scenarios.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>

using namespace ballast;
using namespace ballast::testing;
namespace fs = std::filesystem;

namespace {

const std::vector<std::byte> kZeros(64 * 1024, std::byte{0});

std::vector<std::byte> zeros(std::size_t n) { return {kZeros.begin(), kZeros.begin() + static_cast<std::ptrdiff_t>(n)}; }

// The bytes [0, 4096) of the weight (file [4096, 8192)) survive a
// truncation to 8192; its last 4096 are lost.
void check_half_lost(const std::vector<std::byte>& got, const MappedWeight& m) {
  REQUIRE(got.size() == 8192);
  CHECK(std::vector<std::byte>(got.begin(), got.begin() + 4096) == m.slice(4096, 4096));
  CHECK(std::vector<std::byte>(got.begin() + 4096, got.end()) == zeros(4096));
}

void check_truncation_error(const Status& s, const MappedWeight& m, std::uint64_t now) {
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == ErrorCode::io);
  CHECK_MESSAGE(contains(s.to_string(), m.file.string() + " changed since it was opened (size 65536, now " +
                                            std::to_string(now) + ")"),
                s.to_string());
  CHECK(s.error().file == m.file.string());
}

}  // namespace

TEST_CASE("transfer hands the mapping itself, not a copy") {
  MappedWeight m;
  const auto mapped = m.store.bytes(m.weight);
  REQUIRE(mapped);
  int calls = 0;
  Status s = m.store.transfer(m.weight, 0, 8192, [&](Bytes b) {
    ++calls;
    CHECK(b.data() == mapped->data());
    CHECK(b.size() == 8192);
    CHECK(std::vector<std::byte>(b.begin(), b.end()) == m.slice(4096, 8192));
    CHECK(store::zero_fill_slots_in_use() == 1);  // armed while the sink runs
    return Status();
  });
  CHECK_MESSAGE(s.ok(), s.to_string());
  CHECK(calls == 1);
  CHECK(store::zero_fill_slots_in_use() == 0);

  s = m.store.transfer(m.weight, 100, 50, [&](Bytes b) {
    CHECK(b.data() == mapped->data() + 100);
    CHECK(b.size() == 50);
    return Status();
  });
  CHECK(s.ok());
  // Empty: the sink still runs, with nothing armed.
  s = m.store.transfer(m.weight, 8192, 0, [&](Bytes b) {
    CHECK(b.empty());
    CHECK(store::zero_fill_slots_in_use() == 0);
    return Status();
  });
  CHECK(s.ok());

  // The sink's own error comes back as it is.
  s = m.store.transfer(m.weight, 0, 16, [](Bytes) { return Status(make_error(ErrorCode::device_error, "no device")); });
  CHECK(s.code() == ErrorCode::device_error);
  CHECK(s.error().message == "no device");
  CHECK(store::zero_fill_slots_in_use() == 0);
}

TEST_CASE("transfer refuses ranges outside the weight and unmapped files, and hands inline bytes in place") {
  MappedWeight m;
  int calls = 0;
  auto count = [&](Bytes) {
    ++calls;
    return Status();
  };
  CHECK(m.store.transfer(m.weight, 8192 - 8, 16, count).code() == ErrorCode::out_of_bounds);
  CHECK(m.store.transfer(m.weight, UINT64_MAX - 4, 16, count).code() == ErrorCode::out_of_bounds);
  CHECK(m.store.transfer(m.weight, 4, UINT64_MAX, count).code() == ErrorCode::out_of_bounds);
  WeightRef unmapped = m.weight;
  unmapped.external->file = std::make_shared<const ExternalFile>(ExternalFile{"x.bin", m.dir / "x.bin", 1, 1});
  CHECK(m.store.transfer(unmapped, 0, 16, count).code() == ErrorCode::not_found);
  CHECK(calls == 0);

  auto owned = std::make_shared<std::vector<std::byte>>(byte_pattern(32, 3));
  WeightRef in;
  in.dtype = DataType::uint8;
  in.dims = {32};
  in.storage = WeightRef::Storage::inline_owned;
  in.owned = owned;
  in.inline_bytes = Bytes(owned->data(), owned->size());
  const Status s = m.store.transfer(in, 16, 16, [&](Bytes b) {
    CHECK(b.data() == owned->data() + 16);
    CHECK(b.size() == 16);
    return Status();
  });
  CHECK(s.ok());
  CHECK(m.store.transfer(in, 17, 16, count).code() == ErrorCode::out_of_bounds);
}

TEST_CASE("a file truncated before transfer: io error naming the file, the sink never runs") {
  MappedWeight m;
  truncate_file(m.file, 0);
  bool called = false;
  const Status s = m.store.transfer(m.weight, 0, 8192, [&](Bytes) {
    called = true;
    return Status();
  });
  check_truncation_error(s, m, 0);
  CHECK_FALSE(called);
}

TEST_CASE("a file truncated while the sink reads: the lost pages read as zeros, then io") {
  MappedWeight m;
  std::vector<std::byte> got(8192);
  Status sunk;
  const Status s = m.store.transfer(m.weight, 0, 8192, [&](Bytes b) {
    truncate_file(m.file, 8192);
    std::memcpy(got.data(), b.data(), b.size());  // faults at 8192: answered with a zero page
    return sunk;
  });
  check_truncation_error(s, m, 8192);
  check_half_lost(got, m);
  CHECK(store::zero_fill_slots_in_use() == 0);

  // The lost page reads as zeros for good; later readers are refused first.
  const auto mapped = m.store.bytes(m.weight);
  REQUIRE(mapped);
  CHECK(std::all_of(mapped->begin() + 4096, mapped->end(), [](std::byte x) { return x == std::byte{0}; }));
  check_truncation_error(m.store.check_unchanged(m.weight), m, 8192);
  check_truncation_error(m.store.transfer(m.weight, 0, 8192, [](Bytes) { return Status(); }), m, 8192);

  // The truncation wins over the sink's own error: the bytes it read were wrong.
  MappedWeight n;
  const Status both = n.store.transfer(n.weight, 0, 8192, [&](Bytes b) {
    truncate_file(n.file, 0);
    std::memcpy(got.data(), b.data(), b.size());
    return Status(make_error(ErrorCode::device_error, "the device failed too"));
  });
  check_truncation_error(both, n, 0);
  CHECK(got == zeros(8192));
}

TEST_CASE("a sink that reads the mapping from another thread survives a truncation too") {
  MappedWeight m;
  std::vector<std::byte> got(8192);
  const Status s = m.store.transfer(m.weight, 0, 8192, [&](Bytes b) {
    truncate_file(m.file, 8192);
    std::thread reader([&] { std::memcpy(got.data(), b.data(), b.size()); });
    reader.join();
    return Status();
  });
  check_truncation_error(s, m, 8192);
  check_half_lost(got, m);
}

TEST_CASE("the built-in cpu backend's copy_to_device inside a transfer: io, and the process lives") {
  auto gpu = open_backend("cpu");
  REQUIRE_MESSAGE(gpu.ok(), gpu.error().to_string());
  auto dst = (*gpu)->allocate(8192);
  REQUIRE_MESSAGE(dst.ok(), dst.error().to_string());

  MappedWeight m;
  Status copied = make_error(ErrorCode::internal, "not called");
  const Status s = m.store.transfer(m.weight, 0, 8192, [&](Bytes b) {
    truncate_file(m.file, 8192);
    copied = (*gpu)->copy_to_device(*dst, 0, b);
    return copied;
  });
  CHECK_MESSAGE(copied.ok(), copied.to_string());  // the backend saw zeros, never a signal
  check_truncation_error(s, m, 8192);
  std::vector<std::byte> got(8192);
  REQUIRE((*gpu)->copy_to_host(got, *dst, 0).ok());
  check_half_lost(got, m);

  // Unchanged: the device gets the exact bytes.
  MappedWeight n;
  CHECK(n.store.transfer(n.weight, 0, 8192, [&](Bytes b) { return (*gpu)->copy_to_device(*dst, 0, b); }).ok());
  REQUIRE((*gpu)->copy_to_host(got, *dst, 0).ok());
  CHECK(got == n.slice(4096, 8192));
  CHECK((*gpu)->free(*dst).ok());
}

TEST_CASE("truncations racing transfers never kill the process") {
  // 32 MiB read by a backend copy inside the sink while another thread
  // truncates the file at a random moment: each transfer hands the exact
  // bytes or is an io error.
  constexpr std::size_t kSize = std::size_t{32} << 20;
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  auto dst = (*gpu)->allocate(kSize);
  REQUIRE(dst.ok());
  std::mt19937 rng(5);
  int completed = 0, refused = 0;
  for (int round = 0; round < 8; ++round) {
    CAPTURE(round);
    MappedWeight m(kSize, 0, kSize);
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 2000)(rng));
    const std::uint64_t cut = round % 2 == 0 ? 0 : kSize / 2 + 4096 * static_cast<std::uint64_t>(round);
    std::atomic<bool> go{false};
    std::thread cutter([&] {
      while (!go.load()) std::this_thread::yield();
      std::this_thread::sleep_for(delay);
      truncate_file(m.file, cut);
    });
    const Status s = m.store.transfer(m.weight, 0, kSize, [&](Bytes b) {
      go.store(true);
      return (*gpu)->copy_to_device(*dst, 0, b);
    });
    cutter.join();
    if (s.ok()) {
      ++completed;
      std::vector<std::byte> got(kSize);
      REQUIRE((*gpu)->copy_to_host(got, *dst, 0).ok());
      CHECK(got == m.original);
    } else {
      ++refused;
      CHECK_MESSAGE(s.code() == ErrorCode::io, s.to_string());
      CHECK_MESSAGE(contains(s.to_string(), "changed since it was opened"), s.to_string());
    }
  }
  MESSAGE("transfers completed: " << completed << ", refused: " << refused);
  CHECK(completed + refused == 8);
  CHECK((*gpu)->free(*dst).ok());
}

TEST_CASE("a fault marks every armed range that reads the zero page, and only those") {
  ScratchDir dir("zero-fill");
  std::byte* gone = vanished_mapping(dir, 3 * 4096);
  store::ZeroFillRange whole(gone, 8192);
  store::ZeroFillRange inside(gone + 100, 10);      // same page as the fault, never read itself
  store::ZeroFillRange next_page(gone + 4096, 16);  // another page
  store::ZeroFillRange third_page(gone + 8192, 16);
  REQUIRE(whole.armed());
  CHECK(store::zero_fill_slots_in_use() == 4);
  CHECK_FALSE(whole.faulted());
  CHECK(std::to_integer<int>(*static_cast<volatile std::byte*>(gone + 200)) == 0);  // faults, reads zero
  CHECK(whole.faulted());
  CHECK(inside.faulted());
  CHECK_FALSE(next_page.faulted());
  CHECK(std::to_integer<int>(*static_cast<volatile std::byte*>(gone + 5000)) == 0);
  CHECK(next_page.faulted());
  CHECK_FALSE(third_page.faulted());
  CHECK(whole.disarm());
  CHECK(whole.disarm());  // again: the same answer, nothing freed twice
  CHECK(store::zero_fill_slots_in_use() == 3);
  ::munmap(gone, 3 * 4096);
}

TEST_CASE("all slots busy: a transfer waits for one, or is refused when its thread holds one") {
  MappedWeight m;
  const std::vector<std::byte> buffer(4096);
  std::vector<std::unique_ptr<store::ZeroFillRange>> held;
  for (std::size_t i = 0; i < store::ZeroFillRange::kSlots; ++i) {
    held.push_back(std::make_unique<store::ZeroFillRange>(buffer.data() + i, 1));
    REQUIRE(held.back()->armed());
  }
  CHECK(store::zero_fill_slots_in_use() == store::ZeroFillRange::kSlots);

  // This thread holds slots: waiting could deadlock, so it is refused.
  bool called = false;
  const Status refused = m.store.transfer(m.weight, 0, 16, [&](Bytes) {
    called = true;
    return Status();
  });
  CHECK(refused.code() == ErrorCode::unavailable);
  CHECK_MESSAGE(contains(refused.to_string(), "guards for transfers are in use"), refused.to_string());
  CHECK(refused.error().file == m.file.string());
  CHECK_FALSE(called);

  // Another thread waits until one is released.
  std::atomic<bool> done{false};
  Status waited = make_error(ErrorCode::internal, "not run");
  std::thread other([&] {
    waited = m.store.transfer(m.weight, 0, 16, [](Bytes) { return Status(); });
    done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(done.load());
  held.pop_back();
  other.join();
  CHECK(done.load());
  CHECK_MESSAGE(waited.ok(), waited.to_string());
  held.clear();
  CHECK(store::zero_fill_slots_in_use() == 0);
}

// ---- Faults that are not the armed ranges' go where they went before
// (fresh processes: sigbus_scenarios.hpp).

TEST_CASE("transfer sigbus scenario (child process)") {
  const char* scenario = std::getenv("BALLAST_SIGBUS_SCENARIO");
  if (scenario == nullptr) return;  // only ever run by run_scenario()
  const std::string s = scenario;
  if (s == "engine_handler") install_engine_handler();  // the engine's, installed before ballast's
  ScratchDir dir("transfer-scenario");
  std::byte* gone = vanished_mapping(dir, 8192);
  MappedWeight m;
  // Armed ranges answer their own faults, whatever was installed before.
  std::vector<std::byte> got(8192);
  Status t = m.store.transfer(m.weight, 0, 8192, [&](Bytes b) {
    truncate_file(m.file, 8192);
    std::memcpy(got.data(), b.data(), b.size());
    return Status();
  });
  if (t.code() != ErrorCode::io) ::_exit(3);
  // Then a fault outside the armed range, while one is armed.
  MappedWeight n;
  volatile std::byte sink{};
  t = n.store.transfer(n.weight, 0, 8192, [&](Bytes) {
    if (s == "kill")
      ::raise(SIGBUS);  // sent, not a fault: never answered
    else
      sink = gone[4096];
    return Status();
  });
  static_cast<void>(sink);
  ::_exit(0);  // survived a SIGBUS that should have ended the process
}

TEST_CASE("a SIGBUS outside the armed ranges still goes to the previous handler") {
  auto run = [](const char* scenario) {
    return run_scenario("unit_store_transfer", "transfer sigbus scenario (child process)", scenario);
  };
  const int chained = run("engine_handler");
  CHECK_MESSAGE((WIFEXITED(chained) && WEXITSTATUS(chained) == 42),
                "a fault outside the armed range reaches the engine's handler: status " << chained);
  for (const char* s : {"default", "kill"}) {
    CAPTURE(s);
    const int status = run(s);
    CHECK_MESSAGE(died_of_sigbus(status), "status " << status);
  }
}
