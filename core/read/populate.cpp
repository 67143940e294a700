// populate_mapping and drop_page_cache: the page cache side of cold reads.
//
// A zero_copy registration reads the mapping itself, so there is no
// staging buffer to fill; the faults are what is slow (one page at a time,
// often inside a driver). MADV_POPULATE_READ takes them ahead, from several
// threads at once, at storage speed, and reports a page it cannot read as
// an error (EFAULT) rather than a signal.
#include <ballast/log.hpp>
#include <ballast/read_plan.hpp>

#include "store/byte_ranges.hpp"
#include "store/store_access.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

// Linux 5.14; Debian 12's headers have it, older ones may not.
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace ballast {

namespace {

// Set for good once the kernel refuses MADV_POPULATE_READ (before 5.14):
// MADV_WILLNEED from then on, which starts the reads but does not wait.
std::atomic<bool> populate_refused{false};

std::uint64_t page_size() {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

// 0, or the errno of the advice that failed.
int advise(const std::byte* start, std::uint64_t length) {
  void* addr = const_cast<std::byte*>(start);
  for (;;) {
    if (!populate_refused.load(std::memory_order_relaxed)) {
      if (::madvise(addr, length, MADV_POPULATE_READ) == 0) return 0;
      const int err = errno;
      if (err == EINTR || err == EAGAIN) continue;
      if (err != EINVAL) return err;
      if (!populate_refused.exchange(true))
        log_message(LogLevel::info, "read", "MADV_POPULATE_READ is refused (Linux before 5.14); using MADV_WILLNEED");
    }
    // WILLNEED only starts readahead; a lost page cannot fail it.
    return ::madvise(addr, length, MADV_WILLNEED) == 0 ? 0 : errno;
  }
}

Error named(ErrorCode code, const std::filesystem::path& path, std::string message) {
  Error e = make_error(code, std::move(message));
  e.file = path.string();
  return e;
}

}  // namespace

Result<std::uint64_t> populate_mapping(const WeightStore& store, MappingId mapping, std::span<const ReadRange> ranges,
                                       std::uint32_t threads, std::uint64_t piece_bytes) {
  const auto file = store::StoreAccess::mapping(store, mapping);
  if (!file) return make_error(ErrorCode::not_found, "populate_mapping: no mapping with id " + std::to_string(mapping));
  std::vector<ByteRange> wanted;
  for (const ReadRange& r : ranges) {
    if (!store::range_inside(r.offset, r.length, file->size())) {
      Error e = named(ErrorCode::out_of_bounds, file->path(),
                      "populate_mapping: [" + std::to_string(r.offset) + ", +" + std::to_string(r.length) +
                          ") lies outside " + file->path().string() + " (" + std::to_string(file->size()) + " bytes)");
      e.offset = r.offset;
      return e;
    }
    wanted.push_back({r.offset, r.length});
  }
  wanted = store::merge_ranges(std::move(wanted), file->size());
  const std::uint64_t bytes = store::total_length(wanted);
  if (bytes == 0) return std::uint64_t{0};
  BALLAST_RETURN_IF_ERROR(file->check_unchanged());

  // Whole pages (madvise takes nothing less), cut into pieces a thread
  // takes at a time. The last page of the file is whole in the mapping too.
  const std::uint64_t page = page_size();
  const std::uint64_t piece = std::max(page, piece_bytes / page * page);
  struct Piece {
    std::uint64_t offset, length;
  };
  std::vector<Piece> pieces;
  for (const ByteRange& r : wanted) {
    const std::uint64_t from = r.offset / page * page;
    const std::uint64_t to = (r.offset + r.length + page - 1) / page * page;
    for (std::uint64_t at = from; at < to; at += piece) pieces.push_back({at, std::min(piece, to - at)});
  }

  std::atomic<std::size_t> next{0};
  std::mutex failure_mutex;
  std::optional<Piece> failed;
  int failed_errno = 0;
  const std::byte* base = file->bytes().data();
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < pieces.size();) {
      if (const int err = advise(base + pieces[i].offset, pieces[i].length); err != 0) {
        std::lock_guard lock(failure_mutex);
        if (!failed) failed = pieces[i], failed_errno = err;
        next.store(pieces.size());  // the rest is not worth taking
        return;
      }
    }
  };
  {
    // At most 256 threads (a count past any machine's is a mistake), and
    // as many as the system gives: the calling thread takes pieces too,
    // so a refused thread only slows this down.
    constexpr std::size_t kMaxThreads = 256;
    const std::size_t n = std::clamp<std::size_t>(threads, 1, std::min(pieces.size(), kMaxThreads));
    std::vector<std::jthread> pool;
    pool.reserve(n);
    try {
      for (std::size_t t = 1; t < n; ++t) pool.emplace_back(work);
    } catch (const std::system_error&) {
      log_message(LogLevel::info, "read",
                  "populate_mapping: " + std::to_string(pool.size() + 1) + " of " + std::to_string(n) +
                      " threads started (the system refused more)");
    }
    work();
  }
  if (failed) {
    // EFAULT/EIO: a page could not be read, because the file lost it
    // (truncated) or the device failed. Say which, from the file itself.
    BALLAST_RETURN_IF_ERROR(file->check_unchanged());
    Error e = named(ErrorCode::io, file->path(),
                    "populating [" + std::to_string(failed->offset) + ", " +
                        std::to_string(failed->offset + failed->length) + ") of " + file->path().string() +
                        " failed: " + std::strerror(failed_errno));
    e.offset = failed->offset;
    return e;
  }
  BALLAST_RETURN_IF_ERROR(file->check_unchanged());
  return bytes;
}

namespace {

Status drop_file(const store::MappedFile& file) {
  const std::string path = file.path().string();
  // O_NONBLOCK: a FIFO renamed over the path must not block the open.
  store::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) {
    const int err = errno;
    return named(err == ENOENT || err == ENOTDIR ? ErrorCode::not_found : ErrorCode::io, file.path(),
                 "drop_page_cache: cannot open " + path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return named(ErrorCode::io, file.path(), "drop_page_cache: cannot stat " + path + ": " + std::strerror(errno));
  // Another file at the path now: its cache is not ours to drop, and the
  // mapped one can no longer be reached by name.
  if (!(store::identity_of(st) == file.identity()))
    return named(ErrorCode::io, file.path(),
                 "drop_page_cache: " + path + " now names a different file (inode " +
                     std::to_string(file.identity().inode) + ", now " +
                     std::to_string(static_cast<std::uint64_t>(st.st_ino)) + ")");
  if (const int err = ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED); err != 0)
    return named(ErrorCode::io, file.path(), "drop_page_cache: posix_fadvise on " + path + ": " + std::strerror(err));
  return Status();
}

}  // namespace

Status drop_page_cache(const WeightStore& store) {
  for (MappingId id = 1; id <= store.mapping_count(); ++id) {
    const auto file = store::StoreAccess::mapping(store, id);
    if (file) BALLAST_RETURN_IF_ERROR(drop_file(*file));
  }
  if (const auto model = store::StoreAccess::model_file(store)) BALLAST_RETURN_IF_ERROR(drop_file(*model));
  return Status();
}

}  // namespace ballast
