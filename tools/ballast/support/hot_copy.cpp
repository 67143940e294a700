#include "support/hot_copy.hpp"

#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace ballast::cli {
namespace {

// One piece of the byte stream: `length` bytes of `weight` from `offset`,
// to `at` in the buffer.
struct Segment {
  const WeightRef* weight = nullptr;
  std::uint64_t offset = 0, length = 0, at = 0;
};

// The stream [0, bytes) cut into segments, and those cut again into
// `parts` runs of about equal bytes (a segment split at a boundary).
std::vector<std::vector<Segment>> plan(std::span<const WeightRef* const> pieces, std::uint64_t bytes, unsigned parts) {
  std::vector<std::vector<Segment>> out(parts);
  const std::uint64_t share = (bytes + parts - 1) / parts;
  std::uint64_t at = 0;
  for (std::size_t i = 0; at < bytes; i = (i + 1) % pieces.size()) {
    std::uint64_t offset = 0;
    const std::uint64_t end = std::min(at + pieces[i]->byte_length(), bytes);
    while (at < end) {
      const unsigned part = static_cast<unsigned>(std::min<std::uint64_t>(at / share, parts - 1));
      const std::uint64_t n = std::min(end, (part + 1) * share) - at;
      out[part].push_back({pieces[i], offset, n, at});
      offset += n;
      at += n;
    }
  }
  return out;
}

// The CPU backend writes outputs and copies of 8 MiB or more past the
// cache (its kStreamBytes); the limit a page-in is held against writes the
// same way, or it would be a slower path than the one measured on machines
// whose C library keeps such a memcpy in the cache. With AVX-512 every
// streaming store is a whole 64-byte line, the fastest copy measured on the
// Xeon of docs/benchmarks.md (20 GB/s on two threads against SSE2's 19 and
// 32-byte stores' 17); SSE2's 16-byte streaming store is in every x86-64;
// elsewhere memcpy.
constexpr std::uint64_t kStreamBytes = 8ull << 20;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void stream_lines(std::byte* dst, const std::byte* src, std::uint64_t n) {
  const std::uint64_t head = (64 - (reinterpret_cast<std::uintptr_t>(dst) & 63)) & 63;
  std::memcpy(dst, src, head);
  std::uint64_t i = head;
  for (; i + 256 <= n; i += 256) {
    const __m512i a = _mm512_loadu_si512(src + i);
    const __m512i b = _mm512_loadu_si512(src + i + 64);
    const __m512i c = _mm512_loadu_si512(src + i + 128);
    const __m512i d = _mm512_loadu_si512(src + i + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 192), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}

void stream_sse2(std::byte* dst, const std::byte* src, std::uint64_t n) {
  const std::uint64_t head = (16 - (reinterpret_cast<std::uintptr_t>(dst) & 15)) & 15;
  std::memcpy(dst, src, head);
  std::uint64_t i = head;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, n - i);
  _mm_sfence();
}
#endif

void copy_bytes(std::byte* dst, const std::byte* src, std::uint64_t n, bool stream) {
#if defined(__x86_64__)
  static const bool lines = __builtin_cpu_supports("avx512f");
  if (stream && n >= 512) {
    if (lines)
      stream_lines(dst, src, n);
    else
      stream_sse2(dst, src, n);
    return;
  }
#endif
  static_cast<void>(stream);
  std::memcpy(dst, src, n);
}

}  // namespace

Result<Anchor> measure_hot_copy(const WeightStore& store, std::span<const ValueId> weights, std::uint64_t bytes,
                                unsigned threads, int repeats) {
  std::vector<const WeightRef*> pieces;
  for (ValueId id : weights) {
    auto it = store.weights().find(id);
    if (it == store.weights().end()) continue;
    auto b = store.bytes(it->second);
    if (b && !b->empty()) pieces.push_back(&it->second);
  }
  if (pieces.empty() || bytes == 0 || threads == 0)
    return make_error(ErrorCode::invalid_argument, "the hot copy has no bytes to copy");
  void* buffer = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buffer == MAP_FAILED)
    return make_error(ErrorCode::out_of_memory, std::string("hot copy: mmap of ") + std::to_string(bytes) +
                                                    " bytes failed: " + std::strerror(errno));
  auto* dst = static_cast<std::byte*>(buffer);
  std::memset(dst, 1, bytes);  // touched: every page faulted in before the clock starts
  const auto parts = plan(pieces, bytes, threads);
  const int runs = std::max(repeats, 1);
  std::vector<Status> status(threads);
  std::vector<double> seconds(static_cast<std::size_t>(runs));
  {
    // The threads start once and meet at a barrier before and after each
    // run, so what is timed is the copies, not thread creation.
    std::barrier sync(static_cast<std::ptrdiff_t>(threads) + 1);
    std::vector<std::jthread> workers;
    for (unsigned t = 0; t < threads; ++t)
      workers.emplace_back([&, t] {
        for (int r = 0; r < runs; ++r) {
          sync.arrive_and_wait();
          for (const Segment& s : parts[t]) {
            if (!status[t].ok()) break;
            status[t] = store.transfer(*s.weight, s.offset, s.length, [&](Bytes from) -> Status {
              copy_bytes(dst + s.at, from.data(), from.size(), bytes >= kStreamBytes);
              return Status();
            });
          }
          sync.arrive_and_wait();
        }
      });
    for (int r = 0; r < runs; ++r) {
      sync.arrive_and_wait();
      const auto start = std::chrono::steady_clock::now();
      sync.arrive_and_wait();
      seconds[static_cast<std::size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }
  Status failed;
  for (Status& s : status)
    if (failed.ok() && !s.ok()) failed = std::move(s);
  const double best = *std::min_element(seconds.begin(), seconds.end());
  volatile std::byte sink = dst[bytes - 1];  // the copy is used: it cannot be optimised away
  static_cast<void>(sink);
  ::munmap(buffer, bytes);
  if (!failed.ok()) return std::move(failed.error()).with_context("hot copy: copying the paged bytes");
  return Anchor{bytes, best};
}

}  // namespace ballast::cli
