// TrafficStream: a derivation's memory traffic with its arithmetic taken
// out, the physical limit bench_derive's paired table sets beside the copy
// on the CPU backend.
//
// The copy reads and writes equal amounts. A derivation need not: Q4_0 to
// f16 writes 3.6 bytes per byte read, quant_int8 from f32 reads 4 per byte
// written. On the 2-core AMD EPYC of docs/benchmarks.md, streaming stores of
// non-zero data ran at about 28 GB/s where the copy moved 40-49 (its reads
// run beside its writes), so a write-heavy kernel cannot reach the copy's
// rate there whatever its code. The stream moves exactly a case's bytes
// (read and written) the way the kernels move them: the same number of
// threads taking 1 MiB of output at a time, 64-byte lines, each read line
// combined into the values stored, every store a whole line streamed past
// the cache, and every stored word non-zero (this VM wrote zero lines 3.5x
// faster than any other value; a derivation's outputs are not zeros).
#pragma once

#include <atomic>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace ballast::bench {

class TrafficStream {
 public:
  // `threads` >= 1 counts the calling thread, as the CPU backend's do.
  explicit TrafficStream(unsigned threads);
  ~TrafficStream();
  TrafficStream(const TrafficStream&) = delete;
  TrafficStream& operator=(const TrafficStream&) = delete;

  // Reads the first `read_bytes` of `src` and writes the first
  // `write_bytes` of `dst`, whole 64-byte lines (a tail under 64 bytes is
  // left), both 64-byte aligned. Output line j combines the source lines
  // [j * R / W, (j + 1) * R / W) in lines, so every source line is read
  // once whichever side is larger.
  void run(const std::byte* src, std::uint64_t read_bytes, std::byte* dst, std::uint64_t write_bytes);

  // "avx512f" or "sse2" (x86-64), "portable" elsewhere: the loads and
  // stores the stream uses. The widest the CPU has, whatever the backend's
  // simd= option: the stream stands for the memory's limit, not for a
  // kernel table (on the AMD EPYC of docs/benchmarks.md 256- and 512-bit
  // streamed stores moved the same bytes per second).
  static const char* isa();

 private:
  void work();
  void worker();

  std::barrier<> start_, done_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> next_chunk_{0};
  const std::byte* src_ = nullptr;
  std::byte* dst_ = nullptr;
  std::uint64_t read_lines_ = 0, write_lines_ = 0;
  bool stop_ = false;
};

// Threads the CPU backend of `config` ("cpu?threads=N&...") runs its
// kernels on: N, or every CPU this process may run on.
unsigned cpu_backend_threads(const char* config);

}  // namespace ballast::bench
