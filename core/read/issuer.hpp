// The small interface between the reader (reader.cpp), which decides what
// to read into which staging buffer and in which order to hand it on, and
// the two ways to issue the reads: a pool of pread threads
// (engine_threads.cpp) and an io_uring ring (engine_uring.cpp). An issuer
// knows nothing of plans, files or chunks: it reads bytes into buffers and
// says when each request is done.
#pragma once

#include <ballast/read_plan.hpp>

#include <cstdint>
#include <memory>
#include <span>

namespace ballast::read {

// Fill dst[0, need) from `fd` at `offset`, and as much of the rest of `dst`
// as the file has. A short read is continued until `need` bytes are in (an
// O_DIRECT read of the last block of a file comes back short, and that is
// fine when the wanted bytes are there).
struct ReadRequest {
  std::uint32_t tag = 0;  // the reader's slot; one request per tag in flight
  int fd = -1;
  std::span<std::byte> dst;
  std::uint64_t offset = 0;
  std::uint64_t need = 0;  // <= dst.size()
};

// A finished request: got >= need (done), or got < need with error == 0
// (the file ended first), or error != 0 (errno of the failed read; bytes
// before it may have been read).
struct ReadDone {
  std::uint32_t tag = 0;
  std::uint64_t got = 0;
  int error = 0;
};

class Issuer {
 public:
  virtual ~Issuer() = default;  // implementations wait for every request in flight first
  // Starts one request. An error means it was not started.
  virtual Status start(const ReadRequest& request) = 0;
  // Blocks until a started request finishes, and returns it.
  virtual ReadDone wait() = 0;
};

// The longest single read handed to the kernel: io_uring's length is 32
// bits and pread(2) stops near 2 GiB anyway; longer requests continue.
inline constexpr std::uint64_t kMaxSingleRead = 1ull << 30;

// `threads` threads calling `pread` (or pread(2) when empty).
std::unique_ptr<Issuer> make_thread_issuer(std::uint32_t threads, std::uint32_t tags, PreadFunction pread);

// One ring of `depth` entries (unsupported when built without liburing or
// refused by the kernel). `max_single`: the longest read it submits (a
// test asks for less, so requests continue as a >1 GiB one would).
Result<std::unique_ptr<Issuer>> make_uring_issuer(std::uint32_t depth, std::uint32_t tags,
                                                  std::uint64_t max_single = kMaxSingleRead);
// Whether a ring can be set up at all (io_uring_available() caches it).
bool uring_probe() noexcept;

}  // namespace ballast::read
