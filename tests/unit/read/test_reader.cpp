// read_plan(): every planned byte exactly once, in order, from either
// engine, with and without O_DIRECT; short reads, failed reads, files that
// change or are replaced, and a consumer that stops it.
#include <ballast/log.hpp>
#include <ballast/model.hpp>
#include <ballast/read_plan.hpp>

#include "support/orphaned_prefix_model.hpp"
#include "read/issuer.hpp"
#include "unit/read/read_fixture.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <mutex>
#include <thread>

using namespace ballast;
using namespace ballast::testing;

namespace {

// Three files with dead gaps, overlaps and ranges that are not multiples
// of anything, some longer than the chunks below.
struct GappyStore : HandStore {
  GappyStore() : HandStore("read-gappy") {
    const MappingId a = file("a.bin", 200000);
    const MappingId b = file("b.bin", 50001);
    const MappingId c = file("c.bin", 9000);
    weight(a, 0, 777);
    weight(a, 777, 20000);     // touches: merged
    weight(a, 30001, 40000);
    weight(a, 50000, 30000);   // overlaps
    weight(a, 150003, 49997);  // to the end of the file
    weight(b, 1, 50000);       // all but the first byte
    weight(c, 4095, 2);        // across a page boundary
    weight(c, 8999, 1);        // the last byte
  }
};

std::vector<ReadEngine> engines() {
  std::vector<ReadEngine> e{ReadEngine::threads};
  if (io_uring_available()) e.push_back(ReadEngine::io_uring);
  return e;
}

ReadOptions small_chunks(ReadEngine engine, bool direct) {
  ReadOptions o;
  o.engine = engine;
  o.chunk_bytes = 4096 + 13;
  o.staging_buffers = 3;
  o.queue_depth = 8;  // lowered to 3
  o.direct_io = direct;
  return o;
}

// A PreadFunction that records what it was asked, and reads with pread(2).
struct Recorder {
  std::mutex mutex;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> asked;
  PreadFunction fn() {
    return [this](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
      {
        std::lock_guard lock(mutex);
        asked.emplace_back(offset, dst.size());
      }
      const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
      return n < 0 ? -errno : n;
    };
  }
};

// Log lines said while a case runs.
struct LogCapture {
  std::mutex mutex;
  std::vector<std::string> lines;
  LogCapture() {
    set_log_sink([this](const LogMessage& m) {
      std::lock_guard lock(mutex);
      lines.emplace_back(std::string(m.source) + ": " + std::string(m.text));
    });
  }
  ~LogCapture() { set_log_sink({}); }
};

}  // namespace

TEST_CASE("every planned byte, exactly once, in plan order, from both engines, buffered and O_DIRECT") {
  GappyStore h;
  const ReadPlan plan = ReadPlan::of(h.store);
  REQUIRE(plan.files().size() == 3);
  for (ReadEngine engine : engines()) {
    for (bool direct : {false, true}) {
      CAPTURE(read_engine_name(engine));
      CAPTURE(direct);
      Collector got(h.store);
      const ReadOptions o = small_chunks(engine, direct);
      auto stats = read_plan(h.store, plan, o, got.fn());
      REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
      got.check(h.store, plan, o.chunk_bytes);
      CHECK(stats->engine == engine);
      CHECK(stats->bytes == plan.bytes());
      CHECK(stats->chunks == got.chunks.size());
      CHECK(stats->files == 3);
      CHECK(stats->reads >= stats->chunks);
      // The ring's bound, and it was used.
      CHECK(stats->peak_staging_in_use > 0);
      CHECK(stats->peak_staging_in_use <= o.staging_buffers * o.chunk_bytes);
      CHECK(stats->peak_staging_in_use <= stats->staging_bytes);
      if (direct) {
        CHECK(stats->io_bytes >= stats->bytes);  // the alignment margins
        CHECK(stats->staging_bytes == 3 * (8192 + 8192));  // chunk + 8 KiB, to whole pages
        MESSAGE("O_DIRECT files: " << stats->direct_files << " of 3");
      } else {
        CHECK(stats->io_bytes == stats->bytes);
        CHECK(stats->direct_files == 0);
        CHECK(stats->staging_bytes == 3 * 8192);
      }
      CHECK(contains(stats->to_string(), std::string(read_engine_name(engine)) + ": "));
    }
  }
}

TEST_CASE("automatic picks io_uring where available; an injected pread runs the threads engine") {
  GappyStore h;
  const ReadPlan plan = ReadPlan::of(h.store);
  Collector got(h.store);
  auto stats = read_plan(h.store, plan, ReadOptions{}, got.fn());
  REQUIRE(stats.ok());
  CHECK(stats->engine == (io_uring_available() ? ReadEngine::io_uring : ReadEngine::threads));
  got.check(h.store, plan, ReadOptions{}.chunk_bytes);

  Recorder rec;
  ReadOptions o;
  o.engine = ReadEngine::io_uring;
  o.pread = rec.fn();
  Collector again(h.store);
  stats = read_plan(h.store, plan, o, again.fn());
  REQUIRE(stats.ok());
  CHECK(stats->engine == ReadEngine::threads);
  CHECK_FALSE(rec.asked.empty());
  if (!io_uring_available()) {
    ReadOptions u;
    u.engine = ReadEngine::io_uring;
    auto refused = read_plan(h.store, plan, u, again.fn());
    CHECK(refused.code() == ErrorCode::unsupported);
    CHECK(contains(refused.error().message, "io_uring"));
  }
  CHECK(read_engine_name(ReadEngine::automatic) == "auto");
  CHECK(read_engine_name(ReadEngine::io_uring) == "io_uring");
  CHECK(read_engine_name(ReadEngine::threads) == "threads");
}

TEST_CASE("the orphaned-prefix model read cold: the weights' bytes, never the prefix") {
  ScratchDir dir("read-orphaned");
  const auto m = test_models::OrphanedPrefixModel::write(dir.path());
  auto model = open_model(m.onnx);
  REQUIRE(model.ok());
  const ReadPlan plan = ReadPlan::of(model->store());
  for (ReadEngine engine : engines()) {
    Collector got(model->store());
    Recorder rec;
    ReadOptions o = small_chunks(engine, false);
    auto stats = read_plan(model->store(), plan, o, got.fn());
    REQUIRE(stats.ok());
    got.check(model->store(), plan, o.chunk_bytes);
  }
}

TEST_CASE("buffered reads ask for the planned bytes and nothing else") {
  GappyStore h;
  const ReadPlan plan = ReadPlan::of(h.store);
  Recorder rec;
  ReadOptions o = small_chunks(ReadEngine::threads, false);
  o.pread = rec.fn();
  Collector got(h.store);
  auto stats = read_plan(h.store, plan, o, got.fn());
  REQUIRE(stats.ok());
  got.check(h.store, plan, o.chunk_bytes);
  // Each read lies inside one planned range; together they are the plan.
  // (Descriptors are not files: the ranges of all files are tried.)
  std::uint64_t total = 0;
  for (const auto& [offset, length] : rec.asked) {
    bool inside = false;
    for (const ReadPlanFile& f : plan.files())
      for (const ReadRange& r : f.ranges) inside |= offset >= r.offset && offset + length <= r.offset + r.length;
    CHECK_MESSAGE(inside, "read [" << offset << ", +" << length << ") is outside the plan");
    total += length;
  }
  CHECK(total == plan.bytes());
  CHECK(stats->reads == rec.asked.size());
}

TEST_CASE("short reads, down to one byte at a time, are continued") {
  GappyStore h;
  const ReadPlan plan = ReadPlan::of(h.store);
  for (bool direct : {false, true}) {
    std::atomic<std::uint64_t> calls{0};
    ReadOptions o = small_chunks(ReadEngine::threads, direct);
    o.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
      const std::uint64_t n = calls.fetch_add(1);
      // Every third call reads one byte, every fifth a third of what was
      // asked, the rest all of it. With O_DIRECT an unaligned
      // continuation is refused (EINVAL) and the file is read buffered.
      std::size_t len = dst.size();
      if (n % 3 == 0) len = 1;
      else if (n % 5 == 0) len = std::max<std::size_t>(1, dst.size() / 3);
      const ssize_t got = ::pread(fd, dst.data(), len, static_cast<off_t>(offset));
      return got < 0 ? -errno : got;
    };
    LogCapture log;
    Collector got(h.store);
    auto stats = read_plan(h.store, plan, o, got.fn());
    REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
    got.check(h.store, plan, o.chunk_bytes);
    CHECK(stats->bytes == plan.bytes());
    CHECK(calls.load() > stats->reads);
    // With O_DIRECT the very first read (one byte) is refused: that file
    // falls back to buffered reads, said once; a file falls back once at most.
    if (direct && stats->direct_files + log.lines.size() > 0) {
      CHECK(log.lines.size() >= 1);
      CHECK(log.lines.size() <= 3);
      for (const std::string& line : log.lines) CHECK_MESSAGE(contains(line, "O_DIRECT"), line);
      CHECK(stats->direct_files + log.lines.size() == 3);
    } else {
      CHECK(log.lines.empty());
    }
  }
}

// io_uring submits at most kMaxSingleRead (1 GiB) at once, so a longer
// request continues from where the kernel stopped, as a short read does.
// The ring made with a 4 KiB cap shows it on a small file: 16 reads for
// one 64 KiB request, every byte in its place.
TEST_CASE("io_uring continues a request its single reads do not cover") {
  if (!read::uring_probe()) {
    MESSAGE("skipped: the kernel refuses an io_uring ring here");
    return;
  }
  HandStore h("read-uring-continued");
  const MappingId a = h.file("a.bin", 70000);
  (void)a;
  const int fd = ::open(h.paths[0].c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  std::vector<std::byte> expected(70000);
  REQUIRE(::pread(fd, expected.data(), expected.size(), 0) == 70000);
  auto issuer = read::make_uring_issuer(2, 1, 4096);
  REQUIRE_MESSAGE(issuer.ok(), issuer.status().to_string());
  std::vector<std::byte> dst(65536 + 100);
  REQUIRE((*issuer)->start(read::ReadRequest{0, fd, dst, 1000, 65536}).ok());
  const read::ReadDone done = (*issuer)->wait();
  CHECK(done.tag == 0);
  CHECK(done.error == 0);
  CHECK(done.got >= 65536);
  CHECK(std::equal(dst.begin(), dst.begin() + 65536, expected.begin() + 1000));
  ::close(fd);
}

// staging_freeing saying no (a registration over the ring could not be
// ended) keeps the ring allocated for good: its memory is never handed on.
// A 40 MiB ring is its own mapping (past malloc's largest mmap threshold),
// so a ring freed anyway is unmapped and reading it here faults.
TEST_CASE("a staging ring the hook keeps is never freed: its last chunk is still there after the read") {
  HandStore h("read-ring-kept");
  constexpr std::uint64_t kBytes = 40ull << 20;
  const MappingId a = h.file("a.bin", kBytes);
  h.weight(a, 0, kBytes);
  const ReadPlan plan = ReadPlan::of(h.store);
  ReadOptions o;
  o.engine = ReadEngine::threads;
  o.chunk_bytes = kBytes;
  o.staging_buffers = 1;
  std::span<std::byte> ring;
  bool asked = false;
  o.staging_allocated = [&](std::span<std::byte> r) {
    ring = r;
    return Status();
  };
  o.staging_freeing = [&](std::span<std::byte>) {
    asked = true;
    return false;
  };
  auto stats = read_plan(h.store, plan, o, [](const ReadChunk&) { return Status(); });
  REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
  CHECK(asked);
  REQUIRE(ring.size() >= 4096);
  std::vector<std::byte> expected(4096);
  const int fd = ::open(h.paths[0].c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, expected.data(), expected.size(), 0) == 4096);
  ::close(fd);
  CHECK(std::equal(expected.begin(), expected.end(), ring.begin()));
}

TEST_CASE("a read that fails with EIO: an io error naming the file and offset, nothing consumed after it") {
  GappyStore h;
  const ReadPlan plan = ReadPlan::of(h.store);
  for (std::uint64_t fail_at : {0u, 5u, 17u}) {
    CAPTURE(fail_at);
    std::atomic<std::uint64_t> calls{0};
    std::mutex mutex;
    std::optional<std::pair<int, std::uint64_t>> failed;  // fd, offset
    ReadOptions o = small_chunks(ReadEngine::threads, false);
    o.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
      if (calls.fetch_add(1) == fail_at) {
        std::lock_guard lock(mutex);
        failed = {fd, offset};
        return -EIO;
      }
      const ssize_t got = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
      return got < 0 ? -errno : got;
    };
    Collector got(h.store);
    auto stats = read_plan(h.store, plan, o, got.fn());
    REQUIRE_FALSE(stats.ok());
    REQUIRE(failed.has_value());
    CHECK(stats.code() == ErrorCode::io);
    const std::string text = stats.status().to_string();
    CHECK_MESSAGE(contains(text, "at offset " + std::to_string(failed->second) + " failed: "), text);
    CHECK_MESSAGE(contains(text, std::strerror(EIO)), text);
    REQUIRE(stats.error().offset.has_value());
    CHECK(*stats.error().offset == failed->second);
    // The file it names is the one being read then, and its chunk (and all
    // after it) never reached the consumer.
    const std::string file = stats.error().file;
    CHECK(contains(text, file));
    MappingId m = 0;
    for (const ReadPlanFile& f : plan.files())
      if (f.path.string() == file) m = f.mapping;
    REQUIRE(m != 0);
    bool past = false;
    for (const auto& c : got.chunks) past |= c.mapping > m || (c.mapping == m && c.offset + c.length > failed->second);
    CHECK_FALSE(past);
  }
}

TEST_CASE("a file truncated while it is read: an io error naming it, never SIGBUS") {
  for (ReadEngine engine : engines()) {
    for (bool direct : {false, true}) {
      CAPTURE(read_engine_name(engine));
      CAPTURE(direct);
      HandStore h("read-truncated");
      const MappingId a = h.file("a.bin", 300000);
      h.weight(a, 100, 299900);
      const ReadPlan plan = ReadPlan::of(h.store);
      ReadOptions o = small_chunks(engine, direct);
      o.staging_buffers = 2;
      std::uint64_t consumed = 0;
      auto stats = read_plan(h.store, plan, o, [&](const ReadChunk& c) -> Status {
        // After the first chunk the file loses its tail: the reads still
        // to come find the end of the file.
        if (consumed++ == 0) REQUIRE(::truncate(h.paths[0].c_str(), 50000) == 0);
        CHECK(c.offset < 50000 + 2 * o.chunk_bytes);  // only what was read before
        return Status();
      });
      REQUIRE_FALSE(stats.ok());
      CHECK(stats.code() == ErrorCode::io);
      CHECK(stats.error().file == h.paths[0].string());
      const std::string text = stats.status().to_string();
      // The first read to meet the end says where it asked (a read that
      // starts past the new end finds nothing at its own offset).
      CHECK_MESSAGE((contains(text, " ended at ") || contains(text, "changed since it was opened")), text);
    }
  }
}

TEST_CASE("a file renamed over or deleted: the mapped file is read through its mapping, and said so") {
  for (ReadEngine engine : engines()) {
    for (bool direct : {false, true}) {
      CAPTURE(read_engine_name(engine));
      CAPTURE(direct);
      GappyStore h;
      const ReadPlan plan = ReadPlan::of(h.store);
      // b.bin replaced by another file of the same size (a re-export's
      // rename), c.bin deleted: the mappings hold the files that were
      // opened, and those are what the plan describes.
      const auto fresh = h.dir.write("b.new", std::vector<std::uint8_t>(50001, 9));
      std::filesystem::rename(fresh, h.paths[1]);
      std::filesystem::remove(h.paths[2]);
      LogCapture log;
      Collector got(h.store);
      const ReadOptions o = small_chunks(engine, direct);
      auto stats = read_plan(h.store, plan, o, got.fn());
      REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
      got.check(h.store, plan, o.chunk_bytes);  // the mapped bytes: b.bin's are not 9s
      CHECK(stats->mapped_files == 2);
      CHECK(stats->files == 3);
      CHECK_MESSAGE(contains(stats->to_string(), "2 file(s) read through their mapping"), stats->to_string());
      std::size_t said = 0;
      for (const std::string& line : log.lines)
        said +=
            contains(line, "through its mapping") && (contains(line, h.paths[1].string() + " now names another file") ||
                                                      contains(line, h.paths[2].string() + " is gone"));
      CHECK(said == 2);
    }
  }
}

TEST_CASE("a file renamed over or deleted while it is read: the read goes on, with the mapped bytes") {
  // Unlinking the inode (a delete, or a re-export renamed over its path)
  // changes its status time, not its bytes: not a change of the file read.
  for (ReadEngine engine : engines()) {
    for (bool deleted : {false, true}) {
      CAPTURE(read_engine_name(engine));
      CAPTURE(deleted);
      HandStore h("read-renamed-during");
      const MappingId a = h.file("a.bin", 120000);
      h.weight(a, 0, 120000);
      const ReadPlan plan = ReadPlan::of(h.store);
      Collector got(h.store);
      const ReadOptions o = small_chunks(engine, false);
      bool done = false;
      auto stats = read_plan(h.store, plan, o, [&](const ReadChunk& c) -> Status {
        if (!done) {
          done = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a clock tick: the status time moves
          if (deleted) {
            std::filesystem::remove(h.paths[0]);
          } else {
            std::filesystem::rename(h.dir.write("a.new", std::vector<std::uint8_t>(120000, 9)), h.paths[0]);
          }
        }
        return got(c);
      });
      REQUIRE_MESSAGE(stats.ok(), stats.status().to_string());
      got.check(h.store, plan, o.chunk_bytes);
    }
  }
}

TEST_CASE("a file rewritten in place while it is read: no chunk with its new bytes is handed on") {
  // Rewritten (same size, other bytes) from inside a read: the chunks
  // before it hold the old bytes, that read and the later ones may hold
  // new ones. Every chunk consumed must be the file as mapped.
  for (ReadEngine engine : engines()) {
    for (std::uint64_t at : {0u, 2u, 7u}) {
      CAPTURE(read_engine_name(engine));
      CAPTURE(at);
      HandStore h("read-rewritten");
      const MappingId a = h.file("a.bin", 120000);
      h.weight(a, 0, 120000);
      const ReadPlan plan = ReadPlan::of(h.store);
      const auto mapped = h.store.mmap_full_bytes(a);
      REQUIRE(mapped.has_value());
      const std::vector<std::byte> original(mapped->begin(), mapped->end());
      // Another writer: a new descriptor, every byte flipped. After a
      // clock tick: file times come from the kernel's coarse clock, and a
      // change in the tick the file was written in is invisible to any
      // check of times (docs/loading.md says so).
      const auto rewrite = [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::vector<char> flipped(original.size());
        for (std::size_t i = 0; i < flipped.size(); ++i) flipped[i] = static_cast<char>(~static_cast<int>(original[i]));
        std::ofstream(h.paths[0], std::ios::binary | std::ios::in | std::ios::out)
            .write(flipped.data(), static_cast<std::streamsize>(flipped.size()));
      };
      ReadOptions o = small_chunks(engine, false);
      std::atomic<std::uint64_t> calls{0};
      if (engine == ReadEngine::threads) {
        o.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
          if (calls.fetch_add(1) == at) rewrite();
          const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
          return n < 0 ? -errno : n;
        };
      }
      std::uint64_t consumed = 0;
      bool all_original = true;
      auto stats = read_plan(h.store, plan, o, [&](const ReadChunk& c) -> Status {
        if (engine != ReadEngine::threads && consumed == at) {
          // io_uring takes no pread hook: rewrite from the consumer, with
          // reads of later chunks in flight or done.
          rewrite();
        }
        ++consumed;
        all_original &=
            std::equal(c.bytes.begin(), c.bytes.end(), original.begin() + static_cast<std::ptrdiff_t>(c.offset));
        return Status();
      });
      REQUIRE_FALSE(stats.ok());
      CHECK(stats.code() == ErrorCode::io);
      CHECK(stats.error().file == h.paths[0].string());
      CHECK_MESSAGE(contains(stats.error().message, "changed since it was opened"), stats.error().message);
      CHECK(all_original);
      // It stopped: chunks checked before the rewrite may still be handed
      // on (their bytes are the old ones), never the whole file.
      CHECK(consumed < (120000 + o.chunk_bytes - 1) / o.chunk_bytes);
    }
  }
}

TEST_CASE("a file changed before the read: refused, naming it") {
  GappyStore g;
  {
    std::ofstream(g.paths[0], std::ios::binary | std::ios::app) << "more";
  }
  Collector none(g.store);
  auto stats = read_plan(g.store, ReadPlan::of(g.store), small_chunks(ReadEngine::threads, false), none.fn());
  REQUIRE_FALSE(stats.ok());
  CHECK(stats.code() == ErrorCode::io);
  CHECK(stats.error().file == g.paths[0].string());
  CHECK(none.chunks.empty());
}

TEST_CASE("a plan with a range past the end of the file as this store mapped it is refused before anything is read") {
  HandStore small("read-bounds-small");
  const MappingId m = small.file("x.bin", 100);
  small.weight(m, 0, 100);
  // The same file grown to 200 bytes and mapped by another store: its
  // plans name the same path, with ranges past the first store's 100.
  { std::ofstream(small.paths[0], std::ios::binary | std::ios::app) << std::string(100, 'y'); }
  struct Case {
    std::uint64_t offset, length;
  };
  for (const Case c : {Case{50, 100}, Case{99, 2}, Case{100, 1}, Case{150, 50}}) {
    CAPTURE(c.offset);
    CAPTURE(c.length);
    HandStore grown("read-bounds-grown");
    grown.paths.push_back(small.paths[0]);
    REQUIRE(grown.store.map_external(small.paths[0]).ok());
    grown.weight(1, c.offset, c.length);
    int calls = 0;
    auto stats = read_plan(small.store, ReadPlan::of(grown.store), ReadOptions{}, [&](const ReadChunk&) -> Status {
      ++calls;
      return Status();
    });
    REQUIRE_FALSE(stats.ok());
    CHECK(stats.code() == ErrorCode::out_of_bounds);
    CHECK_MESSAGE(contains(stats.error().message, "lies outside the file as mapped"), stats.error().to_string());
    CHECK(stats.error().offset == c.offset);
    CHECK(calls == 0);
  }
}

TEST_CASE("the consumer's error is returned as it is, and it is not called again") {
  GappyStore h;
  const ReadPlan plan = ReadPlan::of(h.store);
  for (ReadEngine engine : engines()) {
    int calls = 0;
    auto stats = read_plan(h.store, plan, small_chunks(engine, true), [&](const ReadChunk&) -> Status {
      if (++calls == 3) {
        Error e = make_error(ErrorCode::checksum_mismatch, "the engine says stop");
        e.tensor = "w7";
        return e;
      }
      return Status();
    });
    REQUIRE_FALSE(stats.ok());
    CHECK(stats.code() == ErrorCode::checksum_mismatch);
    CHECK(stats.error().message == "the engine says stop");
    CHECK(stats.error().tensor == "w7");
    CHECK(stats.error().context.empty());
    CHECK(calls == 3);
  }
}

TEST_CASE("options: zeros refused, an empty plan reads nothing, a big ring over a small plan") {
  GappyStore h;
  const ReadPlan plan = ReadPlan::of(h.store);
  int calls = 0;
  const auto count = [&](const ReadChunk&) -> Status {
    ++calls;
    return Status();
  };
  ReadOptions o;
  o.chunk_bytes = 0;
  CHECK(read_plan(h.store, plan, o, count).code() == ErrorCode::invalid_argument);
  o = ReadOptions{};
  o.staging_buffers = 0;
  CHECK(read_plan(h.store, plan, o, count).code() == ErrorCode::invalid_argument);
  o = ReadOptions{};
  o.queue_depth = 0;
  CHECK(read_plan(h.store, plan, o, count).code() == ErrorCode::invalid_argument);
  // Past the caps, refused by name before any arithmetic: a chunk near
  // 2^64 once wrapped the staging buffer's size to nothing.
  for (std::uint64_t chunk : {kMaxReadChunkBytes + 1, ~std::uint64_t{0}, ~std::uint64_t{0} - 8192})
    for (bool direct : {false, true}) {
      o = ReadOptions{};
      o.chunk_bytes = chunk;
      o.direct_io = direct;
      auto r = read_plan(h.store, plan, o, count);
      CHECK(r.code() == ErrorCode::invalid_argument);
      CHECK_MESSAGE(
          r.error().message.find("chunk_bytes " + std::to_string(chunk) + " is above the cap") != std::string::npos,
          r.error().message);
    }
  o = ReadOptions{};
  o.staging_buffers = kMaxStagingBuffers + 1;
  CHECK(read_plan(h.store, plan, o, count).code() == ErrorCode::invalid_argument);
  o = ReadOptions{};
  o.queue_depth = ~std::uint32_t{0};
  CHECK(read_plan(h.store, plan, o, count).code() == ErrorCode::invalid_argument);
  CHECK(calls == 0);
  // At the caps: read, each buffer the largest chunk cut (whole pages),
  // not a GiB each.
  o = ReadOptions{};
  o.chunk_bytes = kMaxReadChunkBytes;
  o.staging_buffers = kMaxStagingBuffers;
  o.queue_depth = kMaxReadQueueDepth;
  Collector capped(h.store);
  auto at_caps = read_plan(h.store, plan, o, capped.fn());
  REQUIRE_MESSAGE(at_caps.ok(), at_caps.error().to_string());
  capped.check(h.store, plan, o.chunk_bytes);
  std::uint64_t largest = 0;
  for (const ReadPlanFile& f : plan.files())
    for (const ReadRange& r : f.ranges) largest = std::max(largest, r.length);
  CHECK(at_caps->staging_bytes == plan.range_count() * ((largest + 4095) / 4096 * 4096));

  auto empty = read_plan(h.store, ReadPlan{}, ReadOptions{}, count);
  REQUIRE(empty.ok());
  CHECK(empty->bytes == 0);
  CHECK(empty->staging_bytes == 0);
  CHECK(calls == 0);

  // Default chunks (8 MiB) over 300 KB: one chunk per range, a ring of
  // one buffer per chunk at most.
  Collector got(h.store);
  auto stats = read_plan(h.store, plan, ReadOptions{}, got.fn());
  REQUIRE(stats.ok());
  got.check(h.store, plan, ReadOptions{}.chunk_bytes);
  CHECK(stats->chunks == plan.range_count());
}

TEST_CASE("a plan of another store is refused before anything is read") {
  GappyStore h;
  HandStore other("read-other");
  const MappingId m = other.file("x.bin", 100);
  other.weight(m, 0, 100);
  int calls = 0;
  auto stats = read_plan(h.store, ReadPlan::of(other.store), ReadOptions{}, [&](const ReadChunk&) -> Status {
    ++calls;
    return Status();
  });
  CHECK(stats.code() == ErrorCode::invalid_argument);
  CHECK(calls == 0);
}
