// Residency::load() on the backend under test (issue 28): the cold read
// path puts exactly the values the mapped path does on the device, reads
// only the plan's bytes (never the orphaned prefix), under every strategy
// and a budget that holds only part of the model; a failed read, or a file
// truncated meanwhile, is an io error that leaves nothing half-resident
// and nothing leaked.
#include "conformance/paging_fixture.hpp"

#include <ballast/log.hpp>
#include <ballast/read_plan.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using namespace ballast;
using conformance::OrphanedPrefix;
using conformance::PagingFixture;

namespace {

// Every planned value and every weight, as the device holds it, read back.
struct Snapshot {
  std::vector<std::vector<std::byte>> derived;  // first and second halves, in plan order
  std::vector<std::vector<std::byte>> weights;  // in weight order
};

Snapshot snapshot(Residency& r, const PagingFixture& f) {
  Snapshot s;
  for (const PlannedDerivation& p : f.plan) {
    auto pin = r.pin(p);
    REQUIRE_MESSAGE(pin.ok(), conformance::describe(pin.status()));
    s.derived.push_back(conformance::download(pin->first(), pin->first_bytes()));
    s.derived.push_back(pin->second() != 0 ? conformance::download(pin->second(), pin->second_bytes())
                                           : std::vector<std::byte>{});
  }
  for (ValueId id : f.model.weight_order()) {
    auto pin = r.pin(id);
    REQUIRE_MESSAGE(pin.ok(), conformance::describe(pin.status()));
    s.weights.push_back(conformance::download(pin->first(), pin->first_bytes()));
  }
  return s;
}

// What the mapped path puts on the device: every value pinned through an
// upload residency, read back, released.
Snapshot mapped_reference(PagingFixture& f) {
  auto mapped = f.open(ResidencyStrategy::upload);
  Snapshot s = snapshot(*mapped, f);
  REQUIRE(mapped->release(conformance::gpu()).status.ok());
  return s;
}

// Small chunks, so the model's ranges split across several reads and
// staging buffers, and one weight spans several chunks.
ResidencyLoadOptions small_chunks() {
  ResidencyLoadOptions o;
  o.read.chunk_bytes = 4096 + 512;
  o.read.staging_buffers = 3;
  o.read_cached = true;  // the tests' files are in the page cache: read them anyway
  return o;
}

// A pread that records what it was asked for.
struct Recorder {
  std::mutex mutex;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> reads;  // offset, length
  PreadFunction function() {
    return [this](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
      const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
      std::lock_guard lock(mutex);
      reads.emplace_back(offset, dst.size());
      return n < 0 ? -errno : n;
    };
  }
};

// The warnings said while it lives (the process's log sink, put back on
// destruction, also when a REQUIRE ends the test early).
struct Warnings {
  std::mutex mutex;
  std::vector<std::string> lines;
  Warnings() {
    set_log_sink([this](const LogMessage& m) {
      if (m.level != LogLevel::warning) return;
      std::lock_guard lock(mutex);
      lines.emplace_back(m.text);
    });
  }
  ~Warnings() { set_log_sink({}); }
  Warnings(const Warnings&) = delete;
  Warnings& operator=(const Warnings&) = delete;
};

}  // namespace

TEST_CASE("cold load: every strategy puts the same bytes on the device as the mapped path, reading only the plan") {
  conformance::LeakCheck leaks;
  PagingFixture f;
  const Snapshot reference = mapped_reference(f);
  for (ResidencyStrategy s : {ResidencyStrategy::upload, ResidencyStrategy::paged, ResidencyStrategy::zero_copy}) {
    CAPTURE(residency_strategy_name(s));
    auto r = f.open(s);
    Recorder recorder;
    ResidencyLoadOptions o = small_chunks();
    o.read.direct_io = false;  // exact offsets: O_DIRECT widens reads to its alignment
    o.read.pread = recorder.function();
    std::optional<Warnings> warnings(std::in_place);
    auto report = r->load(o);
    REQUIRE_MESSAGE(report.ok(), conformance::describe(report.status()));
    // A backend that ends the staging ring's registration (where it made
    // one) gets its ring freed: nothing kept for the rest of the process,
    // so nothing said of it.
    for (const std::string& line : warnings->lines)
      CHECK_MESSAGE(line.find("stays allocated") == std::string::npos, line);
    warnings.reset();
    if (s == ResidencyStrategy::zero_copy) {
      CHECK(report->planned_bytes == 0);  // read in place, faulted in ahead
      // Registered, or (a backend that cannot register, or lavapipe's
      // unguarded reads) uploaded by the residency under its budget.
      CHECK(report->zero_copy_weights + report->zero_copy_uploads == 3);
      CHECK(report->zero_copy_uploads == r->registrations().fallback_files * 3);
      CHECK(report->populated_bytes == OrphanedPrefix::kReferenced);
    } else {
      CHECK(report->planned_bytes == OrphanedPrefix::kReferenced);
      CHECK(report->read.bytes == OrphanedPrefix::kReferenced);
      CHECK(report->sources_read == 3);
      CHECK(report->inline_sources == 0);  // the read's sources are filled by it, never pinned again beside it
      CHECK(report->derived_built == OrphanedPrefix::kDerivations);  // quant_int8 of w0 reads the planned transpose
      CHECK(report->read.peak_staging_in_use <= 3 * (4096 + 512));
      // Every byte once, none outside the live tensors (the prefix is never read).
      std::uint64_t total = 0;
      for (auto [offset, length] : recorder.reads) {
        CHECK(offset >= OrphanedPrefix::kPrefix);
        CHECK(offset + length <= OrphanedPrefix::kFileBytes);
        total += length;
      }
      CHECK(total == OrphanedPrefix::kReferenced);
      const ResidencyStats st = r->stats();
      CHECK(st.pinned_bytes == 0);  // load pins nothing
      CHECK(st.host_copy_bytes == 0);
    }
    CHECK(report->left_for_demand == 0);
    // automatic: nothing will read these bytes again, so they are dropped.
    CHECK(report->cache == CachePolicy::drop);
    const Snapshot seen = snapshot(*r, f);
    CHECK(seen.derived == reference.derived);
    CHECK(seen.weights == reference.weights);
    // A second load finds everything there and reads nothing.
    auto again = r->load(o);
    REQUIRE(again.ok());
    CHECK(again->read.bytes == 0);
    CHECK(again->derived_built == 0);
    CHECK(again->already_resident > 0);
    REQUIRE(r->release(conformance::gpu()).status.ok());
    auto after = r->load(o);
    REQUIRE_FALSE(after.ok());
    CHECK(after.error().code == ErrorCode::invalid_argument);
  }
}

TEST_CASE("cold load: under a budget that holds part of the model it loads a prefix of the plan, the rest on demand") {
  conformance::LeakCheck leaks;
  PagingFixture f;
  const Snapshot reference = mapped_reference(f);
  // w0 and its transpose, to_f16 fit; not everything.
  const std::uint64_t budget = conformance::kLargestNeed + 24576;
  auto r = f.open(ResidencyStrategy::paged, budget);
  auto report = r->load(small_chunks());
  REQUIRE_MESSAGE(report.ok(), conformance::describe(report.status()));
  CHECK(report->left_for_demand > 0);
  // automatic: evictions will page the read bytes in again, so they are kept.
  CHECK(report->cache == CachePolicy::keep);
  CHECK(report->sources_read >= 1);
  CHECK(r->stats().device_bytes <= budget);
  CHECK(r->stats().source_evictions + r->stats().derived_evictions == 0);  // a load evicts nothing
  const Snapshot seen = snapshot(*r, f);
  CHECK(seen.derived == reference.derived);
  CHECK(seen.weights == reference.weights);
  REQUIRE(r->release(conformance::gpu()).status.ok());
  // A policy given is the one that runs.
  auto dropping = f.open(ResidencyStrategy::paged, budget);
  ResidencyLoadOptions drop = small_chunks();
  drop.read.cache = CachePolicy::drop;
  auto dropped = dropping->load(drop);
  REQUIRE_MESSAGE(dropped.ok(), conformance::describe(dropped.status()));
  CHECK(dropped->left_for_demand > 0);
  CHECK(dropped->cache == CachePolicy::drop);
  REQUIRE(dropping->release(conformance::gpu()).status.ok());
}

TEST_CASE("cold load: a derivation is built as soon as its sources are in, while later reads go on") {
  // w0 (first in the file) and its derivations, then w1 and w2. The read of
  // w2's bytes waits (up to 5 s) until a derivation has been built: w0's
  // are, from the builder thread, while this read is held. A builder that
  // waited for sources the read was still to fill (w2's own, queued before
  // w0's derivations) would build nothing until the read ends.
  conformance::LeakCheck leaks;
  PagingFixture f;
  auto r = f.open(ResidencyStrategy::upload);
  std::atomic<std::uint64_t> seen_at_w2{UINT64_MAX};
  ResidencyLoadOptions o = small_chunks();
  o.read.direct_io = false;
  o.read.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
    if (offset >= OrphanedPrefix::kW2Offset && seen_at_w2.load() == UINT64_MAX) {
      std::uint64_t builds = 0;
      for (int i = 0; i < 500 && (builds = r->stats().derived_builds) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      seen_at_w2.store(builds);
    }
    const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
    return n < 0 ? -errno : n;
  };
  auto report = r->load(o);
  REQUIRE_MESSAGE(report.ok(), conformance::describe(report.status()));
  REQUIRE(seen_at_w2.load() != UINT64_MAX);  // w2 was read
  CHECK(seen_at_w2.load() > 0);
  CHECK(report->derived_built == OrphanedPrefix::kDerivations);
  REQUIRE(r->release(conformance::gpu()).status.ok());
}

TEST_CASE("cold load: a failed read is an io error naming the file; nothing half-resident, nothing leaked") {
  conformance::LeakCheck leaks;
  PagingFixture f;
  for (int fail_at : {0, 2, 5}) {
    CAPTURE(fail_at);
    auto r = f.open(ResidencyStrategy::upload);
    std::atomic<int> calls{0};
    ResidencyLoadOptions o = small_chunks();
    o.read.direct_io = false;
    o.read.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
      if (calls++ == fail_at) return -EIO;
      const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
      return n < 0 ? -errno : n;
    };
    auto report = r->load(o);
    REQUIRE_FALSE(report.ok());
    CHECK(report.error().code == ErrorCode::io);
    CHECK(report.error().message.find("model.data") != std::string::npos);
    // What completed is whole; the rest pages in from the mapping.
    const ResidencyStats st = r->stats();
    CHECK(st.pinned_bytes == 0);
    // Taken outside CHECK: a REQUIRE failing inside them would be reported
    // as "unknown exception" instead of the backend's error.
    const Snapshot got = snapshot(*r, f);
    const Snapshot want = mapped_reference(f);
    CHECK(got.derived == want.derived);
    REQUIRE(r->release(conformance::gpu()).status.ok());
  }
}

TEST_CASE("cold load: a failed read gives back only what it still holds, not a value it completed that a pin evicted") {
  // The budget holds w0, its three derivations and w2 (71936 bytes) with
  // 100 to spare: the transpose of w2 and all after it are left for
  // demand. While w2's read is held, w0 is complete and its derivations
  // are built; a pin of w1 (384 bytes) then evicts w0 (loaded only to
  // build them) for room, and w2's read fails. The failed load owns only
  // w2's block by then: freeing w0's as well would free it twice (the
  // eviction gave it back), or free a block another value took since.
  conformance::LeakCheck leaks;
  PagingFixture f;
  const std::uint64_t loaded = 2 * OrphanedPrefix::kW0Bytes + 12288 + 6400 + OrphanedPrefix::kW2Bytes;
  auto r = f.open(ResidencyStrategy::paged, loaded + 100);
  const AllocationCounters before = conformance::gpu().counters();
  std::atomic<bool> held{false};
  Pinned w1;
  Status w1_status;
  ResidencyLoadOptions o = small_chunks();
  o.read.direct_io = false;
  o.read.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
    if (offset >= OrphanedPrefix::kW2Offset && !held.exchange(true)) {
      for (int i = 0; i < 500; ++i) {
        const ResidencyStats st = r->stats();
        if (st.derived_builds == 3 && st.pinned_bytes == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      auto pin = r->pin("w1");
      w1_status = pin.status();
      if (pin.ok()) w1 = std::move(*pin);
      return -EIO;
    }
    const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
    return n < 0 ? -errno : n;
  };
  auto report = r->load(o);
  REQUIRE(held.load());
  REQUIRE_MESSAGE(w1_status.ok(), conformance::describe(w1_status));
  REQUIRE_FALSE(report.ok());
  CHECK(report.error().code == ErrorCode::io);
  const ResidencyStats st = r->stats();
  CHECK(st.source_evictions == 1);  // w0, for w1's room
  CHECK(st.stuck_bytes == 0);       // no free refused: nothing was freed twice
  CHECK(st.device_bytes <= st.budget_bytes);
  CHECK(st.device_bytes == conformance::gpu().counters().live_bytes - before.live_bytes);
  // w0 pages in again from the mapping, whole, and its derivations are right.
  auto w0 = r->pin("w0");
  REQUIRE_MESSAGE(w0.ok(), conformance::describe(w0.status()));
  w0->reset();
  w1.reset();
  const Released released = r->release(conformance::gpu());
  CHECK_MESSAGE(released.status.ok(), conformance::describe(released.status));
  CHECK(released.failed_frees == 0);
}

TEST_CASE("cold load: a data file rewritten in place during the read: nothing resident holds its new bytes") {
  // Same size, every byte flipped, from inside a read: values completed
  // before it stay (whole, the mapped file's); no value built from bytes
  // read after it may be handed out. A pin afterwards gets the mapped
  // file's bytes or an io error, never the new ones.
  conformance::LeakCheck leaks;
  // How many reads a whole load takes: rewrite in its first, middle and last read.
  std::atomic<int> reads{0};  // counted from the reader's threads
  {
    PagingFixture f;
    auto r = f.open(ResidencyStrategy::upload);
    ResidencyLoadOptions o = small_chunks();
    o.read.direct_io = false;
    o.read.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
      ++reads;
      const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
      return n < 0 ? -errno : n;
    };
    REQUIRE(r->load(o).ok());
    REQUIRE(r->release(conformance::gpu()).status.ok());
  }
  const int total = reads.load();
  REQUIRE(total > 4);
  for (int rewrite_at : {0, total / 2, total - 1}) {
    CAPTURE(rewrite_at);
    PagingFixture f;
    const Snapshot reference = mapped_reference(f);
    const auto data = f.dir / "model.data";
    std::vector<char> flipped;
    {
      std::ifstream in(data, std::ios::binary);
      flipped.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    for (char& c : flipped) c = static_cast<char>(~c);
    auto r = f.open(ResidencyStrategy::upload);
    std::atomic<int> calls{0};
    ResidencyLoadOptions o = small_chunks();
    o.read.direct_io = false;
    o.read.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
      if (calls++ == rewrite_at) {
        // After a clock tick, so the file's times show the change.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::ofstream(data, std::ios::binary | std::ios::in | std::ios::out)
            .write(flipped.data(), static_cast<std::streamsize>(flipped.size()));
      }
      const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
      return n < 0 ? -errno : n;
    };
    auto report = r->load(o);
    REQUIRE_FALSE(report.ok());
    CHECK(report.error().code == ErrorCode::io);
    CHECK(report.error().message.find("model.data") != std::string::npos);
    std::size_t right = 0, refused = 0;
    for (std::size_t i = 0; i < f.plan.size(); ++i) {
      auto pin = r->pin(f.plan[i]);
      if (!pin.ok()) {
        CHECK(pin.error().code == ErrorCode::io);
        ++refused;
        continue;
      }
      CHECK(conformance::download(pin->first(), pin->first_bytes()) == reference.derived[2 * i]);
      ++right;
    }
    const auto order = f.model.weight_order();
    for (std::size_t i = 0; i < order.size(); ++i) {
      auto pin = r->pin(order[i]);
      if (!pin.ok()) {
        CHECK(pin.error().code == ErrorCode::io);
        ++refused;
        continue;
      }
      CHECK(conformance::download(pin->first(), pin->first_bytes()) == reference.weights[i]);
      ++right;
    }
    MESSAGE("of " << total << " reads, rewritten in read " << rewrite_at << ": resident and right " << right
                  << ", refused (io) " << refused);
    CHECK(refused > 0);
    if (rewrite_at == total - 1) CHECK(right > 0);  // values completed before it stay
    REQUIRE(r->release(conformance::gpu()).status.ok());
  }
}

TEST_CASE("cold load: a data file truncated before the read is an io error naming it") {
  conformance::LeakCheck leaks;
  PagingFixture f;
  auto r = f.open(ResidencyStrategy::upload);
  REQUIRE(::truncate((f.dir / "model.data").c_str(), OrphanedPrefix::kPrefix + 1000) == 0);
  auto report = r->load(small_chunks());
  REQUIRE_FALSE(report.ok());
  CHECK(report.error().code == ErrorCode::io);
  CHECK(report.error().message.find("model.data") != std::string::npos);
  CHECK(r->stats().device_bytes == 0);
  REQUIRE(r->release(conformance::gpu()).status.ok());
}

TEST_CASE("a data file truncated under an uploaded or zero-copy weight: the io error names the file, weight and how") {
  for (ResidencyStrategy strategy : {ResidencyStrategy::upload, ResidencyStrategy::zero_copy}) {
    CAPTURE(residency_strategy_name(strategy));
    conformance::LeakCheck leaks;
    PagingFixture f;
    auto r = f.open(strategy);
    REQUIRE(::truncate((f.dir / "model.data").c_str(), OrphanedPrefix::kPrefix + 1000) == 0);
    const ValueId w = f.model.weight_order().back();
    auto pin = r->pin(w);
    REQUIRE_FALSE(pin.ok());
    CHECK(pin.error().code == ErrorCode::io);
    const std::string message = pin.error().to_string(), name(f.model.value_name(w));
    CAPTURE(message);
    CHECK(message.find("model.data") != std::string::npos);
    CHECK(message.find("paging in") == std::string::npos);  // neither is paged
    // Uploaded; or, for zero_copy, registered where the backend reads host
    // memory in place and uploaded where it does not.
    const bool uploading = message.find("uploading weight '" + name + "'") != std::string::npos;
    const bool registering = message.find("registering weight '" + name + "'") != std::string::npos;
    CHECK((strategy == ResidencyStrategy::upload ? uploading : (uploading || registering)));
    REQUIRE(r->release(conformance::gpu()).status.ok());
  }
}

TEST_CASE("cold load: a thread pinning while another loads gets the loaded value, once") {
  conformance::LeakCheck leaks;
  PagingFixture f;
  const Snapshot reference = mapped_reference(f);
  auto r = f.open(ResidencyStrategy::paged);
  std::optional<Snapshot> seen;
  std::thread pinner([&] { seen = snapshot(*r, f); });
  auto report = r->load(small_chunks());
  pinner.join();
  REQUIRE_MESSAGE(report.ok(), conformance::describe(report.status()));
  REQUIRE(seen);
  CHECK(seen->derived == reference.derived);
  CHECK(seen->weights == reference.weights);
  // Each value became resident once, by whichever got there first.
  const ResidencyStats st = r->stats();
  CHECK(st.source_evictions + st.derived_evictions == 0);
  CHECK(st.derived_rebuilds == 0);
  CHECK(st.derived_builds == OrphanedPrefix::kDerivations);
  REQUIRE(r->release(conformance::gpu()).status.ok());
}

TEST_CASE("cold load: warm bytes (the page cache holds them) are copied from the mapping, not read") {
  conformance::LeakCheck leaks;
  PagingFixture f;
  auto mapped = f.open(ResidencyStrategy::upload);
  const Snapshot reference = snapshot(*mapped, f);  // every byte of the data file was just read
  REQUIRE(mapped->release(conformance::gpu()).status.ok());
  const ReadPlan plan = ReadPlan::of(f.model.store());
  REQUIRE(plan.files().size() == 1);
  auto cached = cached_bytes(f.model.store(), plan.files()[0].mapping, plan.files()[0].ranges);
  REQUIRE(cached.ok());
  CHECK(*cached <= OrphanedPrefix::kReferenced);
  if (*cached != OrphanedPrefix::kReferenced) return;  // the kernel does not report this file's cache to us
  for (ResidencyStrategy s : {ResidencyStrategy::upload, ResidencyStrategy::paged}) {
    CAPTURE(residency_strategy_name(s));
    auto r = f.open(s);
    ResidencyLoadOptions o;  // read_cached false: the default
    Recorder recorder;
    o.read.pread = recorder.function();
    auto report = r->load(o);
    REQUIRE_MESSAGE(report.ok(), conformance::describe(report.status()));
    CHECK(report->sources_cached == 3);
    CHECK(report->cached_bytes == OrphanedPrefix::kReferenced);
    CHECK(report->sources_read == 0);
    CHECK(report->read.bytes == 0);
    CHECK(recorder.reads.empty());
    CHECK(report->derived_built == OrphanedPrefix::kDerivations);
    const Snapshot seen = snapshot(*r, f);
    CHECK(seen.derived == reference.derived);
    CHECK(seen.weights == reference.weights);
    REQUIRE(r->release(conformance::gpu()).status.ok());
  }
}

TEST_CASE("cold load: a source the page cache holds only in part is read; the whole ones are copied") {
  conformance::LeakCheck leaks;
  PagingFixture f;
  const Snapshot reference = mapped_reference(f);
  const ReadPlan plan = ReadPlan::of(f.model.store());
  REQUIRE(plan.files().size() == 1);
  const MappingId mapping = plan.files()[0].mapping;
  const std::filesystem::path data = f.dir / "model.data";
  // w2 ends the file; the file's last page is dropped from the page cache,
  // so w2 is cached in part, w0 and w1 whole.
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t last_page = (OrphanedPrefix::kFileBytes - 1) / page * page;
  REQUIRE(last_page > OrphanedPrefix::kW2Offset);
  auto cached_of = [&](std::uint64_t offset, std::uint64_t length) -> std::uint64_t {
    const ReadRange range{offset, length};
    auto cached = cached_bytes(f.model.store(), mapping, std::span(&range, 1));
    REQUIRE(cached.ok());
    return *cached;
  };
  // Reads the file whole (cached), then drops its last page: first from
  // this process's mapping (the kernel keeps a page some process maps),
  // then from the page cache.
  const auto whole = f.model.store().mmap_full_bytes(mapping);
  REQUIRE(whole.has_value());
  REQUIRE(whole->size() == OrphanedPrefix::kFileBytes);
  auto warm_but_the_last_page = [&] {
    ::madvise(const_cast<std::byte*>(whole->data()) + last_page, OrphanedPrefix::kFileBytes - last_page, MADV_DONTNEED);
    const int fd = ::open(data.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::vector<char> buffer(OrphanedPrefix::kFileBytes);
    CHECK(::pread(fd, buffer.data(), buffer.size(), 0) == static_cast<ssize_t>(buffer.size()));
    ::fdatasync(fd);
    ::posix_fadvise(fd, static_cast<off_t>(last_page), 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    return cached_of(OrphanedPrefix::kW0Offset, OrphanedPrefix::kW0Bytes) == OrphanedPrefix::kW0Bytes &&
           cached_of(OrphanedPrefix::kW1Offset, OrphanedPrefix::kW1Bytes) == OrphanedPrefix::kW1Bytes &&
           cached_of(OrphanedPrefix::kW2Offset, OrphanedPrefix::kW2Bytes) < OrphanedPrefix::kW2Bytes;
  };
  for (ResidencyStrategy s : {ResidencyStrategy::upload, ResidencyStrategy::paged}) {
    CAPTURE(residency_strategy_name(s));
    if (!warm_but_the_last_page()) {
      MESSAGE("skipped: the page cache cannot be dropped in part for this file, or is not reported");
      return;
    }
    auto r = f.open(s);
    ResidencyLoadOptions o;  // read_cached false: the default
    Recorder recorder;
    o.read.pread = recorder.function();
    auto report = r->load(o);
    REQUIRE_MESSAGE(report.ok(), conformance::describe(report.status()));
    // w2 is read. (Another process may drop the page cache meanwhile: then
    // more is read, never less.)
    CHECK(report->sources_read >= 1);
    CHECK(report->sources_read + report->sources_cached == 3);
    CHECK(report->cached_bytes <= OrphanedPrefix::kW0Bytes + OrphanedPrefix::kW1Bytes);
    CHECK(report->read.bytes >= OrphanedPrefix::kW2Bytes);
    CHECK_FALSE(recorder.reads.empty());
    CHECK(report->derived_built == OrphanedPrefix::kDerivations);
    const Snapshot seen = snapshot(*r, f);
    CHECK(seen.derived == reference.derived);
    CHECK(seen.weights == reference.weights);
    REQUIRE(r->release(conformance::gpu()).status.ok());
  }
}

TEST_CASE("cold load: loads (some failing) race pins, weights and prefetches under a tight budget") {
  conformance::LeakCheck leaks;
  PagingFixture f;
  const Snapshot reference = mapped_reference(f);
  const std::uint64_t before = conformance::gpu().counters().live_bytes;
  for (std::uint64_t budget :
       {conformance::kLargestNeed, conformance::kLargestNeed + 4096, conformance::kLargestNeed + 24576,
        OrphanedPrefix::kReferenced + OrphanedPrefix::kDerived}) {
    for (int round = 0; round < 6; ++round) {
      CAPTURE(budget);
      CAPTURE(round);
      auto r = f.open(ResidencyStrategy::paged, budget);
      std::atomic<bool> loading{true};
      std::atomic<int> wrong{0}, failed{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 3; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937 rng(static_cast<unsigned>(round * 31 + t) * 7919u + 1);
          const auto order = f.model.weight_order();
          for (int i = 0; i < 40 || loading.load(); ++i) {
            const std::size_t k = rng() % (f.plan.size() + order.size() + 1);
            if (k == f.plan.size() + order.size()) {
              r->prefetch(std::span(f.plan).subspan(rng() % f.plan.size(), 1));
              continue;
            }
            if (k < f.plan.size()) {
              auto p = r->pin(f.plan[k]);
              if (!p.ok()) {
                if (p.error().code != ErrorCode::out_of_memory && p.error().code != ErrorCode::io) ++failed;
                continue;
              }
              if (conformance::download(p->first(), p->first_bytes()) != reference.derived[2 * k]) ++wrong;
            } else {
              const std::size_t w = k - f.plan.size();
              auto p = r->pin(order[w]);
              if (!p.ok()) {
                if (p.error().code != ErrorCode::out_of_memory && p.error().code != ErrorCode::io) ++failed;
                continue;
              }
              if (conformance::download(p->first(), p->first_bytes()) != reference.weights[w]) ++wrong;
            }
          }
        });
      }
      std::atomic<int> calls{0};
      ResidencyLoadOptions o = small_chunks();
      o.read.direct_io = false;
      const int fail_at = round % 3 == 0 ? -1 : round;
      o.read.pread = [&](int fd, std::span<std::byte> dst, std::uint64_t offset) -> std::int64_t {
        if (calls++ == fail_at) return -EIO;
        const ssize_t n = ::pread(fd, dst.data(), dst.size(), static_cast<off_t>(offset));
        return n < 0 ? -errno : n;
      };
      for (int l = 0; l < 2; ++l) {
        auto report = r->load(o);
        if (!report.ok())
          CHECK_MESSAGE((report.error().code == ErrorCode::io || report.error().code == ErrorCode::out_of_memory),
                        conformance::describe(report.status()));
      }
      loading = false;
      for (auto& t : threads) t.join();
      r->wait_for_prefetches();
      CHECK(wrong == 0);
      CHECK(failed == 0);
      const ResidencyStats st = r->stats();
      CHECK(st.pinned_bytes == 0);
      CHECK(st.stuck_bytes == 0);
      CHECK(st.peak_device_bytes <= budget);
      CHECK(st.device_bytes == conformance::gpu().counters().live_bytes - before);
      const Snapshot seen = snapshot(*r, f);
      CHECK(seen.derived == reference.derived);
      CHECK(seen.weights == reference.weights);
      const Released released = r->release(conformance::gpu());
      CHECK_MESSAGE(released.status.ok(), conformance::describe(released.status));
    }
  }
}
