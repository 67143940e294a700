// Files that change under a live mapping (issue 12 §3): a data file
// truncated, rewritten or replaced after it was mapped. Every read the store
// does for ballast is checked first and copied under the SIGBUS guard, so
// each of these is an io error or the old bytes, never a dead process.
#include "store/mapped_file.hpp"
#include "store/sigbus_guard.hpp"
#include "unit/onnx/external_fixture.hpp"
#include "unit/store/file_change_helpers.hpp"
#include "unit/store/scratch_dir.hpp"
#include "unit/store/sigbus_scenarios.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <random>
#include <thread>

using namespace ballast;
using namespace ballast::testing;
namespace fs = std::filesystem;

TEST_CASE("a data file truncated after it was mapped: checks and copies are io errors naming the file") {
  MappedWeight m;
  REQUIRE(m.store.check_unchanged(m.weight).ok());
  std::vector<std::byte> got(8192);
  REQUIRE(m.store.copy_bytes(m.weight, 0, got).ok());
  CHECK(got == m.slice(4096, 8192));

  truncate_file(m.file, 1000);  // the weight's range [4096, 12288) now lies past the end
  const std::string expected = m.file.string() + " changed since it was opened (size 65536, now 1000)";
  for (const Status& s : {m.store.check_unchanged(m.weight), m.store.check_unchanged(m.mapping),
                          m.store.copy_bytes(m.weight, 0, got)}) {
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == ErrorCode::io);
    CHECK(s.error().file == m.file.string());
    CHECK_MESSAGE(contains(s.to_string(), "io: " + expected), s.to_string());
  }
  // A file that grew is refused the same way: its bytes are not the ones opened.
  truncate_file(m.file, 70000);
  CHECK_MESSAGE(contains(m.store.check_unchanged(m.weight).to_string(), "(size 65536, now 70000)"),
                m.store.check_unchanged(m.weight).to_string());
}

TEST_CASE("a data file rewritten in place at the same size: the modification time says it changed") {
  MappedWeight m;
  rewrite_in_place(m.file);
  const Status s = m.store.check_unchanged(m.weight);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == ErrorCode::io);
  CHECK_MESSAGE(contains(s.to_string(), "changed since it was opened (modified "), s.to_string());
  CHECK_MESSAGE(contains(s.to_string(), ", now "), s.to_string());
  std::vector<std::byte> got(16);
  CHECK(m.store.copy_bytes(m.weight, 0, got).code() == ErrorCode::io);
}

// Either field of the modification time alone is a change, said as one:
// a check that needs both to differ would pass such a rewrite on to the
// status-change time, and say the wrong thing.
TEST_CASE("a rewrite whose modification time differs in its seconds alone, or its nanoseconds alone") {
  for (const auto& [seconds, nanoseconds] : {std::pair{1L, 0L}, std::pair{0L, 1L}}) {
    CAPTURE(seconds);
    CAPTURE(nanoseconds);
    MappedWeight m;
    rewrite_in_place_dated(m.file, seconds, nanoseconds);
    const Status s = m.store.check_unchanged(m.weight);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == ErrorCode::io);
    CHECK_MESSAGE(contains(s.to_string(), "changed since it was opened (modified "), s.to_string());
  }
}

TEST_CASE("a file renamed over the path: the mapping keeps serving the old bytes and check_path says so") {
  MappedWeight m;
  replace_file(m.file, byte_pattern(m.original.size(), 2));
  // The old inode is untouched: nothing changed under the mapping.
  CHECK(m.store.check_unchanged(m.weight).ok());
  std::vector<std::byte> got(8192);
  REQUIRE(m.store.copy_bytes(m.weight, 0, got).ok());
  CHECK(got == m.slice(4096, 8192));
  auto view = m.store.bytes(m.weight);
  REQUIRE(view.has_value());
  CHECK(std::vector<std::byte>(view->begin(), view->end()) == m.slice(4096, 8192));

  const Status path = m.store.check_path(m.mapping);
  REQUIRE_FALSE(path.ok());
  CHECK(path.code() == ErrorCode::io);
  CHECK_MESSAGE(contains(path.to_string(), m.file.string() + " now names a different file (inode "), path.to_string());

  fs::remove(m.file);
  const Status gone = m.store.check_path(m.mapping);
  CHECK(gone.code() == ErrorCode::not_found);
  CHECK_MESSAGE(contains(gone.to_string(), "no longer exists"), gone.to_string());
  CHECK(m.store.copy_bytes(m.weight, 0, got).ok());  // unlinked, still mapped, still the old bytes
  CHECK(got == m.slice(4096, 8192));
}

TEST_CASE("a truncation between the check and the copy is caught by the guard, not a dead process") {
  MappedWeight m;
  int calls = 0;
  store::set_read_hook_for_testing([&](const store::MappedFile& f) {
    if (calls++ == 0) truncate_file(f.path(), 0);
  });
  std::vector<std::byte> got(8192);
  const Status s = m.store.copy_bytes(m.weight, 0, got);
  store::set_read_hook_for_testing({});
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == ErrorCode::io);
  CHECK_MESSAGE(contains(s.to_string(), "changed since it was opened (size 65536, now 0)"), s.to_string());
}

TEST_CASE("truncations racing copies never kill the process") {
  // 32 MiB copied while another thread truncates the file at a random
  // moment: every copy either completes with the original bytes or is an io
  // error. (Copying through the mapping instead dies of SIGBUS here.)
  constexpr std::size_t kSize = std::size_t{32} << 20;
  std::mt19937 rng(12);
  int completed = 0, refused = 0;
  for (int round = 0; round < 12; ++round) {
    CAPTURE(round);
    MappedWeight m(kSize, 0, kSize);
    std::vector<std::byte> got(kSize);
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 4000)(rng));
    const std::uint64_t cut = round % 2 == 0 ? 0 : kSize / 2 + 4096 * static_cast<std::uint64_t>(round);
    std::atomic<bool> go{false};
    std::thread cutter([&] {
      while (!go.load()) std::this_thread::yield();
      std::this_thread::sleep_for(delay);
      truncate_file(m.file, cut);
    });
    go.store(true);
    const Status s = m.store.copy_bytes(m.weight, 0, got);
    cutter.join();
    if (s.ok()) {
      ++completed;
      CHECK(got == m.original);
    } else {
      ++refused;
      CHECK_MESSAGE(s.code() == ErrorCode::io, s.to_string());
      CHECK_MESSAGE(contains(s.to_string(), "changed since it was opened"), s.to_string());
    }
  }
  MESSAGE("copies completed: " << completed << ", refused: " << refused);
  CHECK(completed + refused == 12);
}

TEST_CASE("inline weights borrowed from a truncated .onnx are refused the same way") {
  ScratchDir dir("file-changes-onnx");
  Proto t = onnx_proto::tensor("w", 1, {4});
  onnx_proto::raw_data(t, {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40});
  auto model = load_written(dir, {t});
  REQUIRE_MESSAGE(model.ok(), model.error().to_string());
  const WeightRef& w = weight_named(*model, "w");
  REQUIRE(w.storage == WeightRef::Storage::inline_borrowed);
  std::vector<std::byte> got(16);
  REQUIRE(model->store().copy_bytes(w, 0, got).ok());
  CHECK(std::to_integer<int>(got[3]) == 0x3f);

  truncate_file(dir / "model.onnx", 0);
  for (const Status& s : {model->store().check_unchanged(w), model->store().copy_bytes(w, 0, got)}) {
    REQUIRE_FALSE(s.ok());
    CHECK(s.code() == ErrorCode::io);
    CHECK_MESSAGE(contains(s.to_string(), "model.onnx changed since it was opened (size "), s.to_string());
  }
}

TEST_CASE("copy_bytes refuses ranges outside the weight and copies plain-memory weights as they are") {
  MappedWeight m;
  std::vector<std::byte> got(16);
  CHECK(m.store.copy_bytes(m.weight, 8192 - 8, got).code() == ErrorCode::out_of_bounds);
  CHECK(m.store.copy_bytes(m.weight, UINT64_MAX - 4, got).code() == ErrorCode::out_of_bounds);
  REQUIRE(m.store.copy_bytes(m.weight, 8192 - 16, got).ok());
  CHECK(got == m.slice(4096 + 8192 - 16, 16));

  auto owned = std::make_shared<std::vector<std::byte>>(byte_pattern(32, 3));
  WeightRef in;
  in.dtype = DataType::uint8;
  in.dims = {32};
  in.storage = WeightRef::Storage::inline_owned;
  in.owned = owned;
  in.inline_bytes = Bytes(owned->data(), owned->size());
  CHECK(m.store.check_unchanged(in).ok());
  REQUIRE(m.store.copy_bytes(in, 16, got).ok());
  CHECK(std::vector<std::byte>(got.begin(), got.end()) == std::vector<std::byte>(owned->begin() + 16, owned->end()));

  WeightRef unmapped = m.weight;
  unmapped.external->file = std::make_shared<const ExternalFile>(ExternalFile{"x.bin", m.dir / "x.bin", 1, 1});
  CHECK(m.store.copy_bytes(unmapped, 0, got).code() == ErrorCode::not_found);
}

// ---- The SIGBUS guard itself. Which handler was there before ballast's
// matters, so each scenario runs in a fresh process (sigbus_scenarios.hpp).

namespace {

int run_scenario(const char* scenario) {
  return ballast::testing::run_scenario("unit_store_file_changes", "sigbus scenario (child process)", scenario);
}

}  // namespace

TEST_CASE("sigbus scenario (child process)") {
  const char* scenario = std::getenv("BALLAST_SIGBUS_SCENARIO");
  if (scenario == nullptr) return;  // only ever run by run_scenario()
  ScratchDir dir("sigbus-scenario");
  std::byte* gone = vanished_mapping(dir, 8192);
  std::vector<std::byte> buf(8192), fine = byte_pattern(8192, 6);
  const std::string s = scenario;
  if (s == "engine_handler") install_engine_handler();  // the engine's, installed before ballast's
  // The guard catches its own source range, whatever was installed before.
  if (store::guarded_copy(buf.data(), gone + 100, 4000)) ::_exit(3);
  if (!store::guarded_copy(buf.data(), fine.data(), fine.size()) || buf != fine) ::_exit(4);
  volatile std::byte sink{};
  if (s == "engine_handler" || s == "default") {
    sink = gone[4096];  // outside any guarded copy: the previous disposition
  } else if (s == "destination") {
    // Inside a guarded copy, but the fault is at the destination, outside
    // the guarded source range: not ballast's to catch.
    store::guarded_copy(gone, fine.data(), 64);
  } else if (s == "kill") {
    ::raise(SIGBUS);  // sent, not a fault: never caught
  }
  static_cast<void>(sink);
  ::_exit(0);  // survived a SIGBUS that should have ended the process
}

TEST_CASE("the SIGBUS guard catches its own copy's source range and nothing else") {
  ScratchDir dir("sigbus-guard");
  std::byte* gone = vanished_mapping(dir, 8192);
  std::vector<std::byte> buf(8192);
  CHECK_FALSE(store::guarded_copy(buf.data(), gone, 8192));
  CHECK_FALSE(store::guarded_copy(buf.data(), gone + 4095, 2));  // across a page boundary
  CHECK(store::sigbus_guard_installed());
  CHECK(store::guarded_copy(buf.data(), gone, 0));  // nothing to copy, nothing touched
  // Many in a row: the signal mask is restored each time (SIGBUS is blocked
  // inside the handler; a second fault with it still blocked would kill).
  for (int i = 0; i < 100; ++i) CHECK_FALSE(store::guarded_copy(buf.data(), gone + i * 64, 64));
  ::munmap(gone, 8192);

  // From here on in fresh processes (which handler was first matters).
  const int chained = run_scenario("engine_handler");
  CHECK_MESSAGE((WIFEXITED(chained) && WEXITSTATUS(chained) == 42), "a fault outside the guard reaches the engine's handler: status " << chained);
  for (const char* s : {"default", "destination", "kill"}) {
    CAPTURE(s);
    const int status = run_scenario(s);
    CHECK_MESSAGE(died_of_sigbus(status), "status " << status);
  }
}

// check_descriptor() lets a read go on when only the status-change time
// moved (the mapped file unlinked, or another renamed over its path):
// either field of that time alone is such a move. On a file system whose
// times are whole seconds the nanoseconds never differ, so a check that
// needed both would refuse every read of an unlinked file there.
TEST_CASE("only the status-change time changed: its seconds alone, its nanoseconds alone, or both") {
  store::FileStamp opened;
  opened.size = 65536;
  opened.mtime_sec = 1000;
  opened.mtime_nsec = 0;
  opened.ctime_sec = 2000;
  opened.ctime_nsec = 0;
  CHECK_FALSE(store::only_status_changed(opened, opened));  // nothing changed
  for (const auto& [seconds, nanoseconds] : {std::pair{1L, 0L}, std::pair{0L, 1L}, std::pair{1L, 1L}}) {
    CAPTURE(seconds);
    CAPTURE(nanoseconds);
    store::FileStamp now = opened;
    now.ctime_sec += seconds;
    now.ctime_nsec += nanoseconds;
    CHECK(store::only_status_changed(opened, now));
    // With the size or the modification time changed too, the bytes may
    // have: not a change of status alone.
    store::FileStamp resized = now;
    resized.size -= 1;
    CHECK_FALSE(store::only_status_changed(opened, resized));
    store::FileStamp modified = now;
    modified.mtime_sec += 1;
    CHECK_FALSE(store::only_status_changed(opened, modified));
    modified = now;
    modified.mtime_nsec += 1;
    CHECK_FALSE(store::only_status_changed(opened, modified));
  }
}
