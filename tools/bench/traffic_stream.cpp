#include "traffic_stream.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ballast::bench {
namespace {

constexpr std::uint64_t kLine = 64;
constexpr std::uint64_t kChunkLines = (std::uint64_t{1} << 20) / kLine;  // 1 MiB of output, as the CPU copy hands out

#if defined(__x86_64__)
// Output lines [first, last): each combines its share of source lines and
// is stored whole, streamed. The OR with 0x3c00 keeps every 16-bit word a
// non-zero (f16 1.0-like) value whatever the source holds.
__attribute__((target("avx512f"))) void lines_avx512(const std::byte* src, std::uint64_t read_lines, std::byte* dst,
                                                     std::uint64_t write_lines, std::uint64_t first,
                                                     std::uint64_t last) {
  const __m512i nonzero = _mm512_set1_epi32(0x3c003c00);
  __m512i acc = _mm512_setzero_si512();
  std::uint64_t s = first * read_lines / write_lines;
  for (std::uint64_t j = first; j < last; ++j) {
    const std::uint64_t s_end = (j + 1) * read_lines / write_lines;
    for (; s < s_end; ++s) acc = _mm512_xor_si512(acc, _mm512_load_si512(src + s * kLine));
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + j * kLine), _mm512_or_si512(acc, nonzero));
  }
}

void lines_sse2(const std::byte* src, std::uint64_t read_lines, std::byte* dst, std::uint64_t write_lines,
                std::uint64_t first, std::uint64_t last) {
  const __m128i nonzero = _mm_set1_epi32(0x3c003c00);
  __m128i acc[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
  std::uint64_t s = first * read_lines / write_lines;
  for (std::uint64_t j = first; j < last; ++j) {
    const std::uint64_t s_end = (j + 1) * read_lines / write_lines;
    for (; s < s_end; ++s)
      for (int k = 0; k < 4; ++k)
        acc[k] = _mm_xor_si128(acc[k], _mm_load_si128(reinterpret_cast<const __m128i*>(src + s * kLine) + k));
    for (int k = 0; k < 4; ++k)
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + j * kLine) + k, _mm_or_si128(acc[k], nonzero));
  }
}

bool has_avx512f() { return __builtin_cpu_supports("avx512f"); }
void store_fence() { _mm_sfence(); }
#else
// Elsewhere: the same lines by 64-bit words through the cache (no
// streaming store to name portably), "portable" in the table's header.
void lines_portable(const std::byte* src, std::uint64_t read_lines, std::byte* dst, std::uint64_t write_lines,
                    std::uint64_t first, std::uint64_t last) {
  std::uint64_t acc[8] = {};
  std::uint64_t s = first * read_lines / write_lines;
  for (std::uint64_t j = first; j < last; ++j) {
    const std::uint64_t s_end = (j + 1) * read_lines / write_lines;
    for (; s < s_end; ++s)
      for (int k = 0; k < 8; ++k) acc[k] ^= reinterpret_cast<const std::uint64_t*>(src + s * kLine)[k];
    for (int k = 0; k < 8; ++k) reinterpret_cast<std::uint64_t*>(dst + j * kLine)[k] = acc[k] | 0x3c003c003c003c00ull;
  }
}
constexpr bool has_avx512f() { return false; }
constexpr auto lines_avx512 = lines_portable;
constexpr auto lines_sse2 = lines_portable;
void store_fence() {}
#endif

}  // namespace

TrafficStream::TrafficStream(unsigned threads)
    : start_(static_cast<std::ptrdiff_t>(std::max(1u, threads))),
      done_(static_cast<std::ptrdiff_t>(std::max(1u, threads))) {
  for (unsigned i = 1; i < std::max(1u, threads); ++i) workers_.emplace_back([this] { worker(); });
}

TrafficStream::~TrafficStream() {
  stop_ = true;
  start_.arrive_and_wait();
  for (auto& t : workers_) t.join();
}

const char* TrafficStream::isa() {
#if defined(__x86_64__)
  return has_avx512f() ? "avx512f" : "sse2";
#else
  return "portable";
#endif
}

void TrafficStream::worker() {
  for (;;) {
    start_.arrive_and_wait();
    if (stop_) return;
    work();
    done_.arrive_and_wait();
  }
}

void TrafficStream::work() {
  const bool wide = has_avx512f();
  for (;;) {
    const std::uint64_t first = next_chunk_.fetch_add(1, std::memory_order_relaxed) * kChunkLines;
    if (first >= write_lines_) break;
    const std::uint64_t last = std::min(write_lines_, first + kChunkLines);
    (wide ? lines_avx512 : lines_sse2)(src_, read_lines_, dst_, write_lines_, first, last);
  }
  store_fence();  // streamed stores visible before the caller's clock stops
}

void TrafficStream::run(const std::byte* src, std::uint64_t read_bytes, std::byte* dst, std::uint64_t write_bytes) {
  src_ = src, dst_ = dst;
  read_lines_ = read_bytes / kLine, write_lines_ = write_bytes / kLine;
  if (write_lines_ == 0) return;
  next_chunk_.store(0, std::memory_order_relaxed);
  start_.arrive_and_wait();  // publishes the fields above to the workers
  work();
  done_.arrive_and_wait();
}

unsigned cpu_backend_threads(const char* config) {
  const std::string c = config;
  const auto q = c.find('?');
  if (q != std::string::npos) {
    std::string query = c.substr(q + 1);
    for (std::size_t at = 0; at <= query.size();) {
      const auto end = std::min(query.find('&', at), query.size());
      const std::string kv = query.substr(at, end - at);
      if (kv.rfind("threads=", 0) == 0)
        return static_cast<unsigned>(std::max(1L, std::strtol(kv.c_str() + 8, nullptr, 10)));
      at = end + 1;
    }
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return static_cast<unsigned>(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace ballast::bench
