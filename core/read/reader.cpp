// read_plan(): the ring of staging buffers between the reads and the
// consumer.
//
// The plan is cut into chunks (at most chunk_bytes, never across a range's
// end), numbered in plan order. Chunk i goes into staging buffer i mod
// staging_buffers, so a buffer is free again exactly when the chunk before
// it in that buffer has been consumed, and the chunks are handed on in
// number order: a chunk read early waits in its buffer for its turn. At
// most queue_depth reads are in flight, and at most staging_buffers chunks
// are read or waiting at once. Everything but the reads themselves runs on
// the calling thread: the consumer, opening and closing files, fadvise.
//
// A chunk is handed on only after a check of its file (one fstat of the
// descriptor read) made after its read finished: a file rewritten in place
// while it is read stops the read at the first chunk that could hold new
// bytes, so every chunk consumed, and every value completed from them, is
// the mapped file's. One check covers every read finished before it.
#include <ballast/log.hpp>
#include <ballast/read_plan.hpp>

#include "read/issuer.hpp"
#include "read/source_file.hpp"
#include "store/store_access.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

namespace ballast {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr std::uint64_t align_down(std::uint64_t v, std::uint64_t a) { return v / a * a; }
constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

struct Chunk {
  std::uint32_t file = 0;  // index in the plan's files
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

// A file of the plan while its chunks are read.
struct FileState {
  std::shared_ptr<const store::MappedFile> mapping;
  read::SourceFile source;
  // Descriptors given up by the O_DIRECT fallback: reads still in flight on
  // them finish before they are closed (with the file).
  std::vector<store::Fd> retired;
  bool opened = false;
  bool fell_back = false;
  std::uint64_t verified_through = 0;  // reads finished (Reader::finished_) when the file was last checked
};

struct Slot {
  std::uint64_t chunk = 0;
  std::uint64_t read_offset = 0;  // file offset of the buffer's first byte
  std::uint64_t read_length = 0;  // what was asked (the chunk, or its aligned envelope)
  bool direct = false;            // the read used an O_DIRECT descriptor
  bool done = false;
  std::uint64_t finished = 0;  // its read was the how-manieth to finish (Reader::finished_)
  int fd = -1;                 // the descriptor it was read from; -1: copied from the mapping
};

struct FreeDeleter {
  void operator()(std::byte* p) const noexcept { std::free(p); }
};

class Reader {
 public:
  Reader(const WeightStore& store, const ReadPlan& plan, const ReadOptions& options,
         const std::function<Status(const ReadChunk&)>& consume)
      : store_(store), plan_(plan), options_(options), consume_(consume) {}

  Result<ReadStats> run() {
    const Clock::time_point start = Clock::now();
    BALLAST_RETURN_IF_ERROR(check_read_options(options_));
    BALLAST_RETURN_IF_ERROR(check_engine());
    BALLAST_RETURN_IF_ERROR(cut());
    ring_ = static_cast<std::uint32_t>(std::min<std::uint64_t>(options_.staging_buffers, chunks_.size()));
    depth_ = std::min(options_.queue_depth, ring_);
    stats_.engine = chosen_engine();
    if (chunks_.empty()) {
      stats_.seconds = seconds_since(start);
      return stats_;
    }
    // The issuer first: once the ring is handed to staging_allocated (a
    // backend's registration) every way out must reach staging_freeing,
    // and an issuer that cannot start (no thread, no ring) would leave it
    // registered over memory freed here.
    BALLAST_RETURN_IF_ERROR(make_issuer());
    BALLAST_RETURN_IF_ERROR(allocate());
    if (options_.staging_allocated) {
      BALLAST_RETURN_IF_ERROR(options_.staging_allocated(staging_span()), "preparing the staging buffers");
      staging_hooked_ = true;
    }
    // pump() may throw (the consumer's own code, host memory running out):
    // the ending below runs then too, and the exception goes on after it.
    Status status;
    std::exception_ptr thrown;
    try {
      status = pump();
    } catch (...) {
      thrown = std::current_exception();
    }
    // Never free a buffer the kernel (or a worker) still writes into: every
    // read started is waited for, whatever happened.
    while (in_flight_ > 0) {
      (void)issuer_->wait();
      --in_flight_;
    }
    issuer_.reset();
    files_.clear();  // closes the descriptors
    if (staging_hooked_ && options_.staging_freeing && !options_.staging_freeing(staging_span())) keep_ring();
    staging_.reset();
    if (thrown) std::rethrow_exception(thrown);
    if (!status.ok()) return status.error();
    stats_.seconds = seconds_since(start);
    return stats_;
  }

 private:
  // Every range of every file into chunks of at most chunk_bytes.
  Status cut() {
    files_.resize(plan_.files().size());
    for (std::uint32_t f = 0; f < plan_.files().size(); ++f) {
      const ReadPlanFile& file = plan_.files()[f];
      files_[f].mapping = store::StoreAccess::mapping(store_, file.mapping);
      // A plan made from another store names mappings this one does not
      // have, or has for other files.
      if (!files_[f].mapping || files_[f].mapping->path() != file.path)
        return make_error(ErrorCode::invalid_argument, "read_plan: mapping " + std::to_string(file.mapping) + " (" +
                                                           file.path.string() +
                                                           ") is not this store's: a plan of another store?");
      for (const ReadRange& r : file.ranges) {
        if (r.offset > files_[f].mapping->size() || r.length > files_[f].mapping->size() - r.offset) {
          Error e = make_error(ErrorCode::out_of_bounds,
                               "read_plan: a range of " + file.path.string() + " lies outside the file as mapped");
          e.file = file.path.string();
          e.offset = r.offset;
          return e;
        }
        for (std::uint64_t at = 0; at < r.length; at += options_.chunk_bytes) {
          chunks_.push_back({f, r.offset + at, std::min(options_.chunk_bytes, r.length - at)});
        }
      }
    }
    return Status();
  }

  ReadEngine chosen_engine() const {
    if (options_.pread || options_.engine == ReadEngine::threads) return ReadEngine::threads;
    if (options_.engine == ReadEngine::io_uring) return ReadEngine::io_uring;
    return io_uring_available() ? ReadEngine::io_uring : ReadEngine::threads;
  }

  // One block for the ring, each buffer page-aligned (O_DIRECT needs it of
  // the buffer as of the offsets). With O_DIRECT a buffer holds a chunk's
  // aligned envelope: up to 4 KiB before its first byte and 4 KiB after its
  // last, hence chunk_bytes + 8 KiB.
  Status allocate() {
    const std::uint64_t margin = options_.direct_io ? 2 * read::kDirectAlign : 0;
    // A buffer holds the largest chunk cut, not chunk_bytes: a large chunk
    // size over a small model allocates what the model needs.
    std::uint64_t largest = 0;
    for (const Chunk& c : chunks_) largest = std::max(largest, c.length);
    slot_bytes_ = align_up(largest + margin, read::kDirectAlign);
    const std::uint64_t total = slot_bytes_ * ring_;
    if (total / ring_ != slot_bytes_) return make_error(ErrorCode::overflow, "read_plan: staging size overflows");
    staging_.reset(static_cast<std::byte*>(std::aligned_alloc(read::kDirectAlign, total)));
    if (!staging_)
      return make_error(ErrorCode::out_of_memory,
                        "read_plan: cannot allocate " + std::to_string(total) + " bytes of staging buffers");
    slots_.assign(ring_, Slot{});
    stats_.staging_bytes = total;
    return Status();
  }

  // ReadEngine::io_uring is a demand: refused where it cannot be met,
  // before anything is opened or allocated.
  Status check_engine() const {
    if (chosen_engine() != ReadEngine::io_uring || io_uring_available()) return Status();
    return make_error(ErrorCode::unsupported,
#if defined(BALLAST_HAVE_IO_URING)
                      "read_plan: io_uring was asked for, and the kernel refuses to set up a ring "
                      "(too old, or disabled: kernel.io_uring_disabled, a seccomp filter)"
#else
                      "read_plan: io_uring was asked for, and this ballast was built without liburing"
#endif
    );
  }

  Status make_issuer() {
    if (stats_.engine == ReadEngine::io_uring) {
      BALLAST_ASSIGN_OR_RETURN(issuer_, read::make_uring_issuer(depth_, ring_));
    } else {
      try {
        issuer_ = read::make_thread_issuer(depth_, ring_, options_.pread);
      } catch (const std::exception& e) {
        return make_error(ErrorCode::out_of_memory,
                          std::string("read_plan: no reader thread could be started (") + e.what() + ")");
      }
    }
    return Status();
  }

  // Reads and hands on until every chunk is consumed or something fails.
  Status pump() {
    while (next_consume_ < chunks_.size()) {
      while (next_issue_ < chunks_.size() && next_issue_ - next_consume_ < ring_ && in_flight_ < depth_)
        BALLAST_RETURN_IF_ERROR(issue(next_issue_++));
      Slot& head = slots_[next_consume_ % ring_];
      if (head.done) {
        BALLAST_RETURN_IF_ERROR(deliver(head));
        continue;
      }
      const read::ReadDone done = issuer_->wait();
      --in_flight_;
      BALLAST_RETURN_IF_ERROR(finish(done));
    }
    return Status();
  }

  // A ring something may still read (staging_freeing said so) is never
  // freed: held here, reachable, for the rest of the process.
  void keep_ring() noexcept {
    static std::mutex mutex;
    static auto* kept = new std::vector<std::unique_ptr<std::byte, FreeDeleter>>();
    std::lock_guard lock(mutex);
    try {
      kept->push_back(std::move(staging_));
    } catch (...) {
      (void)staging_.release();  // no room to hold it: leaked, never reused all the same
    }
    try {
      log_message(LogLevel::warning, "read", "the staging ring stays allocated: a registration over it was not ended");
    } catch (...) {  // no memory to say it: kept all the same
    }
  }

  std::span<std::byte> staging_span() const { return {staging_.get(), static_cast<std::size_t>(stats_.staging_bytes)}; }
  std::byte* buffer(std::uint32_t tag) const { return staging_.get() + static_cast<std::size_t>(tag) * slot_bytes_; }

  Status issue(std::uint64_t index) {
    const Chunk& chunk = chunks_[index];
    FileState& file = files_[chunk.file];
    if (!file.opened) {
      BALLAST_ASSIGN_OR_RETURN(file.source, read::open_source(*file.mapping, options_.direct_io));
      file.opened = true;
      ++stats_.files;
      if (file.source.mapped) ++stats_.mapped_files;
    }
    const auto tag = static_cast<std::uint32_t>(index % ring_);
    Slot& slot = slots_[tag];
    slot = Slot{};
    slot.chunk = index;
    in_use_ += chunk.length;
    stats_.peak_staging_in_use = std::max(stats_.peak_staging_in_use, in_use_);
    return start(tag);
  }

  // Starts (or restarts, after the O_DIRECT fallback) the read of a slot's chunk.
  Status start(std::uint32_t tag) {
    Slot& slot = slots_[tag];
    const Chunk& chunk = chunks_[slot.chunk];
    FileState& file = files_[chunk.file];
    slot.direct = file.source.direct;
    if (file.source.mapped) {
      // Copied here, under the SIGBUS guard, checked before and after.
      slot.fd = -1;
      slot.read_offset = chunk.offset;
      slot.read_length = chunk.length;
      BALLAST_RETURN_IF_ERROR(file.mapping->read(chunk.offset, {buffer(tag), static_cast<std::size_t>(chunk.length)}));
      ++stats_.reads;
      stats_.io_bytes += chunk.length;
      slot.done = true;
      slot.finished = ++finished_;
      return Status();
    }
    if (slot.direct) {
      // The aligned envelope. Its end may lie past the end of the file: the
      // read then comes back short, with the wanted bytes in.
      slot.read_offset = align_down(chunk.offset, read::kDirectAlign);
      slot.read_length = align_up(chunk.offset + chunk.length, read::kDirectAlign) - slot.read_offset;
    } else {
      slot.read_offset = chunk.offset;
      slot.read_length = chunk.length;
    }
    slot.fd = file.source.fd.get();
    read::ReadRequest request;
    request.tag = tag;
    request.fd = slot.fd;
    request.dst = {buffer(tag), static_cast<std::size_t>(slot.read_length)};
    request.offset = slot.read_offset;
    request.need = chunk.offset + chunk.length - slot.read_offset;
    BALLAST_RETURN_IF_ERROR(issuer_->start(request));
    ++in_flight_;
    ++stats_.reads;
    stats_.io_bytes += slot.read_length;
    return Status();
  }

  Status finish(const read::ReadDone& done) {
    if (done.tag >= ring_) return make_error(ErrorCode::internal, "read_plan: a read finished on no slot");
    Slot& slot = slots_[done.tag];
    const Chunk& chunk = chunks_[slot.chunk];
    FileState& file = files_[chunk.file];
    if (done.error == EINVAL && slot.direct) {
      // The file system opened O_DIRECT and refuses the reads: read the
      // file buffered from here on (once), and this chunk again.
      if (file.source.direct) {
        BALLAST_ASSIGN_OR_RETURN(read::SourceFile buffered, read::open_source(*file.mapping, false));
        file.retired.push_back(std::move(file.source.fd));
        file.source = std::move(buffered);
        file.fell_back = true;
        log_message(LogLevel::info, "read",
                    file.mapping->path().string() + ": O_DIRECT reads are refused (EINVAL); reading it buffered");
      }
      return start(done.tag);
    }
    if (done.error != 0)
      return read::read_failed(*file.mapping, slot.read_offset + done.got, slot.read_length - done.got, done.error);
    const std::uint64_t need = chunk.offset + chunk.length - slot.read_offset;
    if (done.got < need)
      return read::file_ended(*file.mapping, slot.read_offset + done.got, chunk.offset, chunk.offset + chunk.length);
    slot.done = true;
    slot.finished = ++finished_;
    return Status();
  }

  Status deliver(Slot& slot) {
    const Chunk& chunk = chunks_[slot.chunk];
    FileState& file = files_[chunk.file];
    // The descriptor the chunk came from (an O_DIRECT one given up since is
    // kept open until the file's last chunk is handed on).
    if (slot.fd >= 0 && slot.finished > file.verified_through) {
      BALLAST_RETURN_IF_ERROR(file.mapping->check_descriptor(slot.fd));
      file.verified_through = finished_;
    }
    ReadChunk out;
    out.mapping = plan_.files()[chunk.file].mapping;
    out.offset = chunk.offset;
    out.bytes = Bytes(buffer(static_cast<std::uint32_t>(slot.chunk % ring_)) + (chunk.offset - slot.read_offset),
                      static_cast<std::size_t>(chunk.length));
    const Clock::time_point start = Clock::now();
    Status status = consume_(out);
    stats_.consumer_seconds += seconds_since(start);
    if (!status.ok()) return status;
    ++stats_.chunks;
    stats_.bytes += chunk.length;
    if (options_.cache != CachePolicy::keep && file.source.fd) {
      // Outward to whole pages: the kernel keeps a partly covered page, and
      // the neighbouring chunks' pages were copied out already (or are
      // about to be read, which at worst reads one page again).
      const std::uint64_t from = align_down(chunk.offset, read::kDirectAlign);
      const std::uint64_t to = align_up(chunk.offset + chunk.length, read::kDirectAlign);
      (void)::posix_fadvise(file.source.fd.get(), static_cast<off_t>(from), static_cast<off_t>(to - from),
                            POSIX_FADV_DONTNEED);
    }
    in_use_ -= chunk.length;
    slot = Slot{};
    ++next_consume_;
    if (next_consume_ == chunks_.size() || chunks_[next_consume_].file != chunk.file) {
      // The file's last chunk: every read of it finished (chunks are handed
      // on in order, each after its read), so its descriptors can go.
      if (file.source.direct) ++stats_.direct_files;
      file.source.fd = store::Fd();
      file.retired.clear();
    }
    return Status();
  }

  const WeightStore& store_;
  const ReadPlan& plan_;
  const ReadOptions& options_;
  const std::function<Status(const ReadChunk&)>& consume_;

  std::vector<Chunk> chunks_;
  std::vector<FileState> files_;
  std::uint32_t ring_ = 0;   // staging buffers
  std::uint32_t depth_ = 0;  // reads in flight at most
  std::uint64_t slot_bytes_ = 0;
  std::unique_ptr<std::byte, FreeDeleter> staging_;
  bool staging_hooked_ = false;  // staging_allocated accepted it: staging_freeing is owed
  std::vector<Slot> slots_;
  std::unique_ptr<read::Issuer> issuer_;  // after staging_: destroyed (and drained) first
  std::uint64_t next_issue_ = 0;
  std::uint64_t next_consume_ = 0;
  std::uint32_t in_flight_ = 0;
  std::uint64_t finished_ = 0;  // reads finished so far
  std::uint64_t in_use_ = 0;    // planned bytes of the chunks read or waiting
  ReadStats stats_;
};

}  // namespace

Status check_read_options(const ReadOptions& options) {
  if (options.chunk_bytes == 0) return make_error(ErrorCode::invalid_argument, "read_plan: chunk_bytes is 0");
  if (options.staging_buffers == 0) return make_error(ErrorCode::invalid_argument, "read_plan: staging_buffers is 0");
  if (options.queue_depth == 0) return make_error(ErrorCode::invalid_argument, "read_plan: queue_depth is 0");
  // Caps before any arithmetic on them: a chunk near 2^64 would wrap the
  // staging buffer's size to nothing, and every read would overrun it.
  const auto over = [](const char* what, std::uint64_t value, std::uint64_t cap) {
    return make_error(ErrorCode::invalid_argument, std::string("read_plan: ") + what + " " + std::to_string(value) +
                                                       " is above the cap of " + std::to_string(cap));
  };
  if (options.chunk_bytes > kMaxReadChunkBytes) return over("chunk_bytes", options.chunk_bytes, kMaxReadChunkBytes);
  if (options.staging_buffers > kMaxStagingBuffers)
    return over("staging_buffers", options.staging_buffers, kMaxStagingBuffers);
  if (options.queue_depth > kMaxReadQueueDepth) return over("queue_depth", options.queue_depth, kMaxReadQueueDepth);
  return Status();
}

Result<ReadStats> read_plan(const WeightStore& store, const ReadPlan& plan, const ReadOptions& options,
                            const std::function<Status(const ReadChunk&)>& consume) {
  return Reader(store, plan, options, consume).run();
}

}  // namespace ballast
