// Cold reads: a model's referenced bytes fetched from storage by large
// parallel reads, not by page faults on its mappings.
//
// Warm (the page cache holds the files) a mapping is free; cold it is the
// slowest way to read a file: one fault per page, one kernel thread at a
// time. A ReadPlan lists exactly the bytes some weights need (never a dead
// prefix, an unreferenced shard tensor or padding), per file, in file
// order, merged where ranges touch and split at dead gaps; read_plan()
// fetches them with io_uring (or a pool of pread threads) into a small
// ring of staging buffers and hands each filled buffer to the caller while
// the next reads go on. Residency::load() is the engine's way to use it
// (docs/loading.md); this header is for engines that place bytes
// themselves, and for tools that print the plan.
//
//   auto plan = ReadPlan::of(model.store());       // every referenced weight
//   ReadOptions options;                          // measured defaults
//   auto stats = read_plan(model.store(), plan, options, [&](const ReadChunk& c) -> Status {
//     // c.bytes: file bytes [c.offset, c.offset + c.bytes.size()) of mapping c.mapping,
//     // valid until this returns; c.weights: what they belong to
//     return Status();
//   });
#pragma once

#include <ballast/export.hpp>
#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

// ------------------------------------------------------------ the plan

// One stretch of a file to read: referenced bytes with no dead byte inside.
struct ReadRange {
  std::uint64_t offset = 0;  // in the file
  std::uint64_t length = 0;
  friend bool operator==(const ReadRange&, const ReadRange&) = default;
};

struct ReadPlanFile {
  MappingId mapping = 0;
  std::filesystem::path path;      // as mapped (display)
  std::uint64_t file_bytes = 0;    // the file's size when it was mapped
  std::uint64_t read_bytes = 0;    // sum of `ranges`
  std::vector<ReadRange> ranges;   // sorted, merged where they touch or overlap
};

// A weight whose bytes a plan reads, and where: the engine (or Residency)
// places each chunk by these.
struct ReadPlanWeight {
  ValueId id{};
  MappingId mapping = 0;
  std::uint64_t offset = 0;  // in the file
  std::uint64_t length = 0;
};

class ReadPlan {
 public:
  ReadPlan() = default;
  // Every external weight of `store` (inline weights live in the model
  // file and are not part of a cold read: they are few and small).
  static ReadPlan of(const WeightStore& store);
  // Only `weights` (ids the store does not hold, and inline weights, are
  // ignored; a repeated id counts once).
  static ReadPlan of(const WeightStore& store, std::span<const ValueId> weights);

  // The bytes of this plan that lie inside `keep` (per mapping: sorted,
  // non-overlapping ranges; read_bytes and path are not read): how a
  // cooperative load gives each rank its part of one plan
  // (cooperative_load.hpp). weights(): those with a byte in the result.
  ReadPlan only(std::span<const ReadPlanFile> keep) const;

  std::span<const ReadPlanFile> files() const noexcept { return files_; }  // in mapping-id order
  std::span<const ReadPlanWeight> weights() const noexcept { return weights_; }  // by (mapping, offset)
  std::uint64_t bytes() const noexcept { return bytes_; }                  // to read, every file
  std::uint64_t range_count() const noexcept;
  bool empty() const noexcept { return bytes_ == 0; }
  // "3 files, 17 ranges, 2814.25 MiB to read" and one line per file.
  std::string to_string() const;

 private:
  std::vector<ReadPlanFile> files_;
  std::vector<ReadPlanWeight> weights_;
  std::uint64_t bytes_ = 0;
};

// ------------------------------------------------------------ reading it

enum class ReadEngine : std::uint8_t {
  automatic,  // io_uring where the kernel offers it, else threads
  io_uring,   // refused as unsupported where the kernel does not offer it
  threads,    // `queue_depth` threads of pread(2)
};
std::string_view read_engine_name(ReadEngine e) noexcept;  // "auto", "io_uring", "threads"

// What to leave in the page cache after a cold read.
enum class CachePolicy : std::uint8_t {
  drop,  // POSIX_FADV_DONTNEED on each range once consumed: a one-shot load
         // does not push the engine's working set out of memory
  keep,  // leave it (a paged residency pages in again from the mapping)
  // The default. read_plan(): drop. Residency::load(): keep for a paged
  // residency whose budget cannot hold every value the load places
  // (evictions will page those bytes in again through the mapping), drop
  // otherwise (ResidencyLoadReport::cache). Last, so drop and keep keep
  // the values they had before it.
  automatic,
};

// Reads of a file: `fd` opened by read_plan(), `offset` in the file, into
// `dst`. Returns bytes read (short reads are retried for the rest; 0 is
// the end of the file), or -errno. Empty: pread(2). Tests inject faults
// with it; an engine could route reads elsewhere. Called from the
// reader's threads, several at once. Setting it selects ReadEngine::threads.
using PreadFunction = std::function<std::int64_t(int fd, std::span<std::byte> dst, std::uint64_t offset)>;

// What read_plan() accepts (invalid_argument past them, naming the cap):
// a ring or a queue beyond these is a mistake, not a tuning (the measured
// best here is 16 of 2 MiB: docs/loading.md), and a chunk past 1 GiB
// would make a staging buffer of it.
inline constexpr std::uint32_t kMaxReadQueueDepth = 1024;
inline constexpr std::uint32_t kMaxStagingBuffers = 1024;
inline constexpr std::uint64_t kMaxReadChunkBytes = 1ull << 30;

struct ReadOptions {
  ReadEngine engine = ReadEngine::automatic;
  std::uint32_t queue_depth = 16;            // reads in flight (io_uring SQEs, or threads)
  std::uint64_t chunk_bytes = 2ull << 20;    // largest single read; a staging buffer's size (the
                                             // largest chunk the plan cuts, when that is smaller)
  std::uint32_t staging_buffers = 16;        // the ring: staging memory is at most this x chunk_bytes,
                                             // plus 8 KiB a buffer with direct_io (O_DIRECT's alignment
                                             // margins); queue_depth is lowered to it
  bool direct_io = false;                    // O_DIRECT where the file system takes it, buffered
                                             // otherwise (said once per file through the log sink).
                                             // Off by default: measured slower here (docs/loading.md)
  CachePolicy cache = CachePolicy::automatic;
  PreadFunction pread;                       // empty: pread(2)
  // The staging ring once allocated (its whole span), and again just
  // before it is freed: Residency::load() registers it with the backend
  // (page-locked host memory on CUDA and HIP, so device copies from it
  // are DMA). An error from the first ends the read before anything is
  // read; the second is then not called. The second says whether the
  // ring may be freed: false when something over it (a registration the
  // backend would not end) may still read it; the reader then keeps the
  // ring allocated for the rest of the process rather than hand its
  // memory to the next allocation.
  std::function<Status(std::span<std::byte>)> staging_allocated;
  std::function<bool(std::span<std::byte>)> staging_freeing;
};

// One filled staging buffer, handed to the consumer.
struct ReadChunk {
  MappingId mapping = 0;
  std::uint64_t offset = 0;  // file offset of bytes[0]
  Bytes bytes;               // valid until the consumer returns; never outside the plan
};

struct ReadStats {
  ReadEngine engine = ReadEngine::threads;  // the one that ran
  std::uint64_t bytes = 0;          // delivered to the consumer: exactly the plan's bytes
  std::uint64_t io_bytes = 0;       // asked of the kernel: bytes plus O_DIRECT's alignment margins
  std::uint64_t reads = 0;          // read requests issued
  std::uint64_t chunks = 0;         // consumer calls
  std::uint32_t files = 0;
  std::uint32_t direct_files = 0;   // files read with O_DIRECT
  std::uint32_t mapped_files = 0;   // files read through their mapping: the path named another file, or none
  std::uint64_t staging_bytes = 0;  // the ring's size (what it allocated)
  std::uint64_t peak_staging_in_use = 0;  // most planned bytes held in staging at once (read or being
                                          // read, not yet consumed): <= staging_buffers x chunk_bytes
  double seconds = 0;               // wall time of the whole read
  double consumer_seconds = 0;      // of which the consumer ran
  std::string to_string() const;
};

// Reads every range of `plan` and hands it to `consume` in chunks of at
// most options.chunk_bytes, each chunk inside one range (so inside the
// plan), every planned byte exactly once, files in plan order, chunks of
// a file in offset order. `consume` runs on the calling thread, one chunk
// at a time, while up to staging_buffers - 1 further chunks are read.
// Before a file is read it is opened by its path; when the path names
// another file or none (renamed over, deleted), the mapped inode is read
// through its mapping instead (said through the log sink, counted in
// mapped_files). Each chunk is handed on only after a check of its file
// made once its read finished (size, times: a file rewritten in place
// while read is caught before any chunk that could hold new bytes). A
// file that changed, that ends early, or a read that fails, is an io
// error naming the file and the offset, and nothing more is consumed.
// `consume`'s error stops the read and is returned as it is. Staging
// buffers are allocated here (page-aligned) and freed before return.
// invalid_argument naming the first field read_plan() refuses (a zero or
// a value past its cap); Residency::load() checks its options up front,
// whether or not anything is left to read.
Status check_read_options(const ReadOptions& options);

Result<ReadStats> read_plan(const WeightStore& store, const ReadPlan& plan, const ReadOptions& options,
                            const std::function<Status(const ReadChunk&)>& consume);

// Whether io_uring can be used in this process (set up a ring once, cached).
bool io_uring_available() noexcept;

// Takes the page faults of `ranges` of `mapping` ahead of use, in
// parallel: MADV_POPULATE_READ (Linux 5.14; MADV_WILLNEED where that is
// missing) over pieces of at most `piece_bytes`, on `threads` threads.
// For zero_copy registrations: the faults are then taken at storage speed,
// not one at a time inside a driver. A file truncated meanwhile is an io
// error naming it (its pages are not touched by this thread). Returns the
// bytes populated: the union of `ranges` (the pages around them are
// populated whole).
Result<std::uint64_t> populate_mapping(const WeightStore& store, MappingId mapping, std::span<const ReadRange> ranges,
                                       std::uint32_t threads = 8, std::uint64_t piece_bytes = 8ull << 20);

// Of `ranges` of `mapping`, the bytes whose pages the page cache holds
// now (mincore(2) over the mapping: nothing is read or faulted in). The
// kernel reports pages of a file this process may not write only when
// this process has touched them, so this can say "not cached" of cached
// pages, never the reverse. Residency::load() reads what is not cached
// and copies what is from the mapping.
Result<std::uint64_t> cached_bytes(const WeightStore& store, MappingId mapping, std::span<const ReadRange> ranges);

// Drops the page cache of every file `store` mapped (POSIX_FADV_DONTNEED;
// dirty pages are not written first). For cold measurements.
Status drop_page_cache(const WeightStore& store);

}  // namespace ballast

BALLAST_API_END
