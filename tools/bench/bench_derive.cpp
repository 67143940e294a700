// bench_derive: every derivation on one backend, each next to a device copy
// of matching size in the same run, reporting effective bandwidth
// ((bytes read + bytes written) / time) and, after the run, the ratio of
// each derivation's bandwidth to the copy's (the README figures; targets:
// >= 0.7x, transpose >= 0.5x).
//
//   bench_derive [--backend CONFIG] [--register-mib N] [--llc-mib N] [--paired N] [google benchmark flags]
//
// --register-mib N also measures zero-copy registration after the
// benchmarks: a file of N MiB is written and mapped read-only, registered
// whole (time and bytes reported), a weight in its middle is transposed
// through the registration and checked against a host transpose, and the
// mapping is unregistered.
//
// Each case runs at two sizes, named from the last-level cache this
// process's first CPU shares (sysfs; at least 64 MiB for a device other
// than the CPU and lavapipe; `--llc-mib N` overrides): "past" moves
// at least 4x that cache (read + written), so neither the kernel nor the
// copy runs from it and the ratio compares memory bandwidth on any machine
// (the targets are judged on it); "in" moves at most a quarter of it, so the
// ratio shows what the kernel does when its operands are cached. One fixed
// size would mean different things on a machine with a 32 MiB cache and
// one with 480 MiB.
//
// CONFIG is an open_backend() string ("cpu", "cpu?threads=1", "vulkan:0"),
// default "cpu". The "memcpy" rows use the backend's own copy_device, which
// on the CPU spreads the copy over every thread just as the kernels do, and
// from 8 MiB on writes past the cache as the kernels' outputs do (a copy of
// read + write traffic, the physical limit of a derivation's), so both
// sides of the ratio use the same cores and the same kind of stores.
//
// --paired N prints, instead of Google Benchmark's run, a table of the
// past cases the --benchmark_filter regex matches, each ratio the median
// of N rounds that time kernel and copy in turn (run_paired says why); on
// the CPU backend each round also times the case's traffic with no
// arithmetic (traffic_stream.hpp), the limit a copy-ratio target may sit
// above on a machine whose writes are slower than its reads.
#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>

#include "traffic_stream.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <map>
#include <memory>
#include <regex>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace ballast;

std::unique_ptr<GpuBackend> g_backend;

struct Case {
  std::string name;
  DerivationLaunch shape;
  double target;  // minimum ratio to the copy's bandwidth
};

// The largest data or unified cache of CPU 0, from sysfs: the one an
// operand of this process competes for. (sysconf(_SC_LEVEL3_CACHE_SIZE)
// may report a whole package's L3 where a core shares only part of it.)
std::uint64_t last_level_cache_bytes() {
  std::uint64_t best = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    FILE* type = std::fopen((dir + "type").c_str(), "r");
    if (type == nullptr) break;
    char t[32] = {};
    const bool read_type = std::fscanf(type, "%31s", t) == 1;
    std::fclose(type);
    if (!read_type || std::strcmp(t, "Instruction") == 0) continue;
    FILE* size = std::fopen((dir + "size").c_str(), "r");
    if (size == nullptr) continue;
    unsigned long long n = 0;
    char unit = 0;
    if (std::fscanf(size, "%llu%c", &n, &unit) >= 1) {
      const std::uint64_t bytes = unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : unit == 'G' ? n << 30 : n;
      best = std::max<std::uint64_t>(best, bytes);
    }
    std::fclose(size);
  }
  if (best == 0) {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    best = static_cast<std::uint64_t>(std::max<long>({l3, l2, 0}));
  }
  return best != 0 ? best : std::uint64_t{32} << 20;  // unknown: the README machine's 32 MiB
}

std::uint64_t traffic_of(const DerivationLaunch& l) {
  const auto s = derivation_sizes(l);
  return s ? s->src_bytes + s->scales_bytes + s->zero_point_bytes + s->dst_bytes + s->dst2_bytes : 0;
}

// `c` with its rows scaled so the case moves about `bytes` (read +
// written), in whole multiples of 64 rows (every kind's rows are free, and
// 64 keeps the tiled transposes' and the GGUF rows' alignment as it was).
Case scaled(const Case& c, std::uint64_t bytes, const char* label) {
  Case out = c;
  const std::uint64_t per_row = std::max<std::uint64_t>(1, traffic_of(c.shape) / c.shape.rows);
  std::uint64_t rows = (bytes / per_row) / 64 * 64;
  if (rows == 0) rows = std::min<std::uint64_t>(c.shape.rows, 64);
  out.shape.rows = rows;
  // "past/transpose/f32/16384x4096": the base name with its rows replaced.
  std::string name = c.name;
  const std::string from = "/" + std::to_string(c.shape.rows) + "x";
  if (const auto at = name.find(from); at != std::string::npos)
    name.replace(at, from.size(), "/" + std::to_string(rows) + "x");
  out.name = std::string(label) + "/" + name;
  return out;
}

DerivationLaunch make(Derivation kind, DataType type, std::uint64_t rows, std::uint64_t cols, std::uint32_t block = 0,
                      ZeroPoints zp = ZeroPoints::absent) {
  DerivationLaunch l;
  l.kind = kind;
  l.src_type = type;
  l.rows = rows;
  l.cols = cols;
  l.block_size = block;
  l.zero_points = zp;
  return l;
}

std::vector<Case> cases() {
  using D = Derivation;
  using T = DataType;
  // The base shapes; main() runs each with its rows scaled past and within
  // the last-level cache.
  return {
      {"transpose/f32/4096x4096", make(D::transpose, T::float32, 4096, 4096), 0.5},
      {"transpose/f16/8192x4096", make(D::transpose, T::float16, 8192, 4096), 0.5},
      {"transpose/u8/8192x8192", make(D::transpose, T::uint8, 8192, 8192), 0.5},
      {"to_f16/f32/4096x4096", make(D::to_f16, T::float32, 4096, 4096), 0.7},
      {"to_f16/bf16/8192x4096", make(D::to_f16, T::bfloat16, 8192, 4096), 0.7},
      {"dequant_int4/f32_scales/packed_zp/8192x8192/bs32",
       make(D::dequant_int4, T::float32, 8192, 8192, 32, ZeroPoints::packed_u4), 0.7},
      {"dequant_int4/f16_scales/no_zp/8192x8192/bs128", make(D::dequant_int4, T::float16, 8192, 8192, 128), 0.7},
      {"repack_int4/f32_scales/packed_zp/8192x16384/bs32",
       make(D::repack_int4, T::float32, 8192, 16384, 32, ZeroPoints::packed_u4), 0.7},
      {"repack_int4/f16_scales/no_zp/8192x16384/bs128", make(D::repack_int4, T::float16, 8192, 16384, 128), 0.7},
      {"quant_int8/f32/4096x4096", make(D::quant_int8, T::float32, 4096, 4096), 0.7},
      {"quant_int8/f16/8192x4096", make(D::quant_int8, T::float16, 8192, 4096), 0.7},
      // GGUF blocks (issue 27): >= 0.8x on the 32-element types, 0.7x on the K-quants.
      {"dequant_gguf/q4_0/8192x8192", make(D::dequant_gguf, T::q4_0, 8192, 8192), 0.8},
      {"dequant_gguf/q8_0/8192x8192", make(D::dequant_gguf, T::q8_0, 8192, 8192), 0.8},
      {"dequant_gguf/q2_k/8192x8192", make(D::dequant_gguf, T::q2_k, 8192, 8192), 0.7},
      {"dequant_gguf/q3_k/8192x8192", make(D::dequant_gguf, T::q3_k, 8192, 8192), 0.7},
      {"dequant_gguf/q4_k/8192x8192", make(D::dequant_gguf, T::q4_k, 8192, 8192), 0.7},
      {"dequant_gguf/q5_k/8192x8192", make(D::dequant_gguf, T::q5_k, 8192, 8192), 0.7},
      {"dequant_gguf/q6_k/8192x8192", make(D::dequant_gguf, T::q6_k, 8192, 8192), 0.7},
      {"dequant_gguf_f32/q4_k/8192x8192", make(D::dequant_gguf_f32, T::q4_k, 8192, 8192), 0.7},
  };
}

void fail(benchmark::State& state, const std::string& what, const Status& st) {
  state.SkipWithError((what + ": " + st.to_string()).c_str());
}

// Device buffers for one case at a time, so the run never holds more than
// one case's memory.
struct Buffers {
  std::string owner;
  std::vector<DevicePtr> ptrs;
  DerivationLaunch launch;  // a derivation case's, its operands pointed at ptrs (bind_operands)
  void release() {
    for (DevicePtr p : ptrs) (void)g_backend->free(p);
    ptrs.clear();
    owner.clear();
  }
  // Allocates and fills `bytes` with a pattern of plausible values; 0 is
  // returned for empty operands.
  Result<DevicePtr> add(std::uint64_t bytes, std::uint32_t fill) {
    if (bytes == 0) return DevicePtr{0};
    auto p = g_backend->allocate(bytes);
    if (!p) return p;
    ptrs.push_back(*p);
    std::vector<std::byte> host(bytes);
    std::uint32_t x = fill;
    for (std::uint64_t i = 0; i + 4 <= bytes; i += 4) {
      x = x * 1664525u + 1013904223u;
      // Normal, moderate floats whatever the operand's type: every f32,
      // f16 and bf16 lane gets an exponent just below 1 and a random sign
      // and mantissa. (Subnormal operands would make the benchmark measure
      // the CPU's microcode assists instead of the kernels.)
      const std::uint32_t v = (x & 0x83ff83ffu) | 0x3c003c00u;
      std::memcpy(host.data() + i, &v, 4);
    }
    BALLAST_RETURN_IF_ERROR(g_backend->copy_to_device(*p, 0, host));
    return *p;
  }
};

Buffers g_buffers;

std::uint64_t traffic(const DerivationSizes& s) {
  return s.src_bytes + s.scales_bytes + s.zero_point_bytes + s.dst_bytes + s.dst2_bytes;
}

// Allocates the case's operands in `b` and points `l`'s at them.
Status bind_operands(Buffers& b, const DerivationSizes& sizes, DerivationLaunch& l) {
  Result<DevicePtr> ptrs[] = {b.add(sizes.src_bytes, 1), b.add(sizes.scales_bytes, 2), b.add(sizes.zero_point_bytes, 3),
                              b.add(sizes.dst_bytes, 4), b.add(sizes.dst2_bytes, 5)};
  for (auto& p : ptrs)
    if (!p) return p.status();
  // Operands in the order added above, skipping the empty ones.
  std::size_t next = 0;
  auto take = [&](std::uint64_t bytes) { return bytes ? b.ptrs[next++] : DevicePtr{0}; };
  l.src = take(sizes.src_bytes);
  l.scales = take(sizes.scales_bytes);
  l.zero_point = take(sizes.zero_point_bytes);
  l.dst = take(sizes.dst_bytes);
  l.dst2 = take(sizes.dst2_bytes);
  return {};
}

void bench_derivation(benchmark::State& state, const Case& c) {
  auto sizes = derivation_sizes(c.shape);
  if (!sizes) return fail(state, "shape", sizes.status());
  if (g_buffers.owner != c.name) {
    g_buffers.release();
    g_buffers.launch = c.shape;
    if (auto st = bind_operands(g_buffers, *sizes, g_buffers.launch); !st) return fail(state, "allocate", st);
    g_buffers.owner = c.name;
  }
  const DerivationLaunch l = g_buffers.launch;
  // One untimed launch first. On NVIDIA's Vulkan driver the first launch
  // on a case's fresh buffers took up to 54 ms where the next took 0.7
  // (docs/gpu-runs/2026-12-04-h200.md); Google Benchmark then stopped after
  // that one timed iteration and reported it as the kernel's speed.
  if (auto st = g_backend->launch(l); !st) return fail(state, "launch", st);
  if (auto st = g_backend->synchronize(); !st) return fail(state, "synchronize", st);
  for (auto _ : state) {
    if (auto st = g_backend->launch(l); !st) return fail(state, "launch", st);
    if (auto st = g_backend->synchronize(); !st) return fail(state, "synchronize", st);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * traffic(*sizes)));
}

// A device-to-device copy moving as many bytes (read + written) as the case.
void bench_copy(benchmark::State& state, const Case& c) {
  auto sizes = derivation_sizes(c.shape);
  if (!sizes) return fail(state, "shape", sizes.status());
  const std::uint64_t bytes = traffic(*sizes) / 2;
  const std::string owner = "copy " + std::to_string(bytes);
  if (g_buffers.owner != owner) {
    g_buffers.release();
    auto a = g_buffers.add(bytes, 6), b = g_buffers.add(bytes, 7);
    if (!a || !b) return fail(state, "allocate", a ? b.status() : a.status());
    g_buffers.owner = owner;
  }
  // Untimed first, as for the derivation.
  if (auto st = g_backend->copy_device(g_buffers.ptrs[1], 0, g_buffers.ptrs[0], 0, bytes); !st)
    return fail(state, "copy_device", st);
  if (auto st = g_backend->synchronize(); !st) return fail(state, "synchronize", st);
  for (auto _ : state) {
    if (auto st = g_backend->copy_device(g_buffers.ptrs[1], 0, g_buffers.ptrs[0], 0, bytes); !st)
      return fail(state, "copy_device", st);
    if (auto st = g_backend->synchronize(); !st) return fail(state, "synchronize", st);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * bytes));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// --paired N: each past case's derivation and its copy timed in turn, N
// rounds, the two sides' order alternating; the ratio is the median of the
// N rounds' ratios. A shared machine's memory bandwidth drifts over
// seconds (this project's 2-core VM has streamed its copy at 45 to 112
// GB/s within one run), and a ratio of two medians taken over a whole run
// compares different moments; a round here lasts tens of milliseconds, so
// both sides of each ratio see the same machine. The quartiles of the
// rounds' ratios are printed beside it.
//
// On the CPU backend a third side runs in each round: the TrafficStream
// (traffic_stream.hpp), the case's bytes read and written with no
// arithmetic, whose ratio to the copy says how near the copy a kernel of
// that traffic could come on this machine, and the kernel's ratio to it how
// much of that its arithmetic costs.
struct Paired {
  std::vector<double> kernel, copy, ratio;
  std::vector<double> stream, of_stream, stream_vs_copy;  // empty off the CPU backend
};

std::unique_ptr<bench::TrafficStream> g_stream;  // set on the CPU backend

// Bytes per second of `op` moving `bytes` per call, calls repeated for at
// least 10 ms.
template <class Op>
Result<double> timed(Op&& op, std::uint64_t bytes) {
  std::uint64_t calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double ms = 0;
  do {
    BALLAST_RETURN_IF_ERROR(op());
    ++calls;
    ms = ms_since(t0);
  } while (ms < 10);
  return static_cast<double>(bytes * calls) / ms * 1e3;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

Result<Paired> paired(const Case& c, int rounds) {
  auto sizes = derivation_sizes(c.shape);
  if (!sizes) return sizes.status();
  const std::uint64_t bytes = traffic(*sizes);
  Buffers kernel_buffers, copy_buffers;
  struct Release {
    Buffers& a;
    Buffers& b;
    ~Release() { a.release(), b.release(); }
  } release{kernel_buffers, copy_buffers};
  DerivationLaunch l = c.shape;
  BALLAST_RETURN_IF_ERROR(bind_operands(kernel_buffers, *sizes, l));
  auto from = copy_buffers.add(bytes / 2, 6), to = copy_buffers.add(bytes / 2, 7);
  if (!from) return from.status();
  if (!to) return to.status();
  auto derive = [&]() -> Status {
    BALLAST_RETURN_IF_ERROR(g_backend->launch(l));
    return g_backend->synchronize();
  };
  auto copy = [&]() -> Status {
    BALLAST_RETURN_IF_ERROR(g_backend->copy_device(*to, 0, *from, 0, bytes / 2));
    return g_backend->synchronize();
  };
  // The stream's operands: the case's read bytes (source, scales, zero
  // points) and written bytes (both outputs), CPU device pointers being host
  // addresses.
  const std::uint64_t read_bytes = sizes->src_bytes + sizes->scales_bytes + sizes->zero_point_bytes;
  const std::uint64_t write_bytes = sizes->dst_bytes + sizes->dst2_bytes;
  std::byte *stream_src = nullptr, *stream_dst = nullptr;
  if (g_stream) {
    auto in = copy_buffers.add(read_bytes, 8), out = copy_buffers.add(write_bytes, 9);
    if (!in) return in.status();
    if (!out) return out.status();
    stream_src = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(*in));
    stream_dst = reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(*out));
  }
  auto stream = [&]() -> Status {
    g_stream->run(stream_src, read_bytes, stream_dst, write_bytes);
    return {};
  };
  BALLAST_RETURN_IF_ERROR(derive());  // each once untimed: first touches, first launches
  BALLAST_RETURN_IF_ERROR(copy());
  if (g_stream) {
    // The first run also proves the stream writes every line it is timed for.
    std::memset(stream_dst, 0, write_bytes);
    BALLAST_RETURN_IF_ERROR(stream());
    for (std::uint64_t at = 0; at + 64 <= write_bytes; at += 64) {
      std::uint64_t word = 0;
      std::memcpy(&word, stream_dst + at, sizeof word);
      if (word == 0)
        return make_error(ErrorCode::internal,
                          "the traffic stream left the line at " + std::to_string(at) + " unwritten");
    }
  }
  Paired p;
  const int sides = g_stream ? 3 : 2;
  for (int r = 0; r < rounds; ++r) {
    double got[3] = {};
    for (int k = 0; k < sides; ++k) {
      const int side = (r + k) % sides;  // rotating, so no side always runs first
      auto gbs = side == 0 ? timed(derive, bytes) : side == 1 ? timed(copy, bytes) : timed(stream, bytes);
      if (!gbs) return gbs.status();
      got[side] = *gbs;
    }
    p.kernel.push_back(got[0]), p.copy.push_back(got[1]), p.ratio.push_back(got[0] / got[1]);
    if (g_stream)
      p.stream.push_back(got[2]), p.of_stream.push_back(got[0] / got[2]), p.stream_vs_copy.push_back(got[2] / got[1]);
  }
  return p;
}

// The paired table; false if a case failed to run.
bool run_paired(const std::vector<Case>& all, const std::string& filter, int rounds) {
  std::regex match;
  try {
    match = std::regex(filter.empty() ? "." : filter);
  } catch (const std::regex_error& e) {
    std::printf("paired: --benchmark_filter=%s is not a regular expression: %s\n", filter.c_str(), e.what());
    return false;
  }
  std::printf("paired: %d rounds per case; ratio = median of the rounds' ratios [lower, upper quartile]\n\n", rounds);
  if (g_stream)
    std::printf(
        "stream: the case's bytes with no arithmetic (%s, %s); 'of stream' = derivation / stream,\n"
        "'stream/copy' = how near the copy that traffic comes here (medians of the rounds' ratios)\n\n",
        bench::TrafficStream::isa(), "1 MiB of output per chunk, streamed non-zero lines");
  std::printf("%-56s %8s %8s %18s %7s%s\n", "derivation", "GB/s", "copy", "ratio", "target",
              g_stream ? "   stream  of stream  stream/copy" : "");
  bool ok = true, all_met = true;
  for (const Case& c : all) {
    if (c.name.rfind("past/", 0) != 0 || !std::regex_search(c.name, match)) continue;
    auto p = paired(c, rounds);
    if (!p) {
      std::printf("%-56s failed: %s\n", c.name.c_str(), p.error().to_string().c_str());
      ok = false;
      continue;
    }
    const double ratio = median(p->ratio);
    all_met = all_met && ratio >= c.target;
    std::string stream_columns;
    if (!p->stream.empty()) {
      char buf[96];
      std::snprintf(buf, sizeof buf, " %8.1f %10.2f %12.2f", median(p->stream) / 1e9, median(p->of_stream),
                    median(p->stream_vs_copy));
      stream_columns = buf;
    }
    std::printf("%-56s %8.1f %8.1f %5.2f [%.2f, %.2f] %6.1fx%s%s\n", c.name.c_str(), median(p->kernel) / 1e9,
                median(p->copy) / 1e9, ratio, quantile(p->ratio, 0.25), quantile(p->ratio, 0.75), c.target,
                stream_columns.c_str(), ratio >= c.target ? "" : "  BELOW TARGET");
  }
  std::printf("%s\n", all_met ? "all ratios meet their targets" : "some ratios are below target");
  return ok;
}

// Prints as usual and remembers each case's bandwidths for the ratio
// table, which takes each side's median: with --benchmark_repetitions=N
// --benchmark_enable_random_interleaving=true (tools/dev bench passes them)
// the N runs of a derivation and of its copy are spread over the whole run,
// so one moment when a shared machine's memory (or its cache) was busy or
// idle does not decide a ratio.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, std::vector<double>> runs_of;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      const auto it = r.counters.find("bytes_per_second");
      if (r.error_occurred || r.run_type != Run::RT_Iteration || it == r.counters.end()) continue;
      runs_of[r.run_name.function_name].push_back(it->second.value);
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

// Removes "--backend X", "--register-mib N", "--llc-mib N" and "--paired N"
// from argv before Google Benchmark sees (and rejects) them, and notes the
// --benchmark_filter it will see (the paired table uses it too).
std::string take_flags(int& argc, char** argv, std::uint64_t& register_mib, std::uint64_t& llc_mib, int& paired_rounds,
                       std::string& filter) {
  std::string config = "cpu";
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) {
      config = argv[++i];
    } else if (a.rfind("--backend=", 0) == 0) {
      config = a.substr(10);
    } else if (a == "--register-mib" && i + 1 < argc) {
      register_mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--llc-mib" && i + 1 < argc) {
      llc_mib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--paired" && i + 1 < argc) {
      paired_rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      if (a.rfind("--benchmark_filter=", 0) == 0) filter = a.substr(19);
      argv[out++] = argv[i];
    }
  }
  argc = out;
  return config;
}

// Zero-copy registration of a whole read-only file mapping, then a kernel
// reading a weight in its middle through it. Returns false on a mismatch or
// an error (printed).
bool measure_registration(std::uint64_t mib) {
  const std::uint64_t bytes = mib << 20;
  char path[] = "/tmp/ballast-bench-register-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return std::perror("registration: mkstemp"), false;
  unlink(path);
  {
    std::vector<float> chunk(1 << 20);
    for (std::size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<float>(i % 4099) * 0.25f;
    for (std::uint64_t done = 0; done < bytes; done += chunk.size() * sizeof(float)) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size() * sizeof(float), bytes - done));
      if (write(fd, chunk.data(), n) != static_cast<ssize_t>(n)) return std::perror("registration: write"), close(fd), false;
    }
  }
  void* map = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return std::perror("registration: mmap"), false;
  const auto* host = static_cast<const unsigned char*>(map);
  bool ok = false;
  auto t0 = std::chrono::steady_clock::now();
  auto reg = g_backend->register_host(map, bytes, HostAccess::read_only);
  const double register_ms = ms_since(t0);
  if (!reg) {
    std::printf("registration: %llu MiB refused after %.1f ms: %s\n", static_cast<unsigned long long>(mib), register_ms,
                reg.error().to_string().c_str());
    munmap(map, bytes);
    return reg.code() == ErrorCode::unsupported;  // a refusal the backend declares is an answer, not a failure
  }
  // A 4096 x 1024 f32 weight (16 MiB) starting in the middle of the mapping.
  const std::uint64_t rows = 4096, cols = 1024, weight_bytes = rows * cols * 4;
  const std::uint64_t offset = (bytes / 2) & ~std::uint64_t{255};
  DerivationLaunch l;
  l.kind = Derivation::transpose;
  l.src_type = DataType::float32;
  l.rows = rows;
  l.cols = cols;
  l.src = *reg + offset;
  double kernel_ms = 0;
  if (offset + weight_bytes <= bytes) {
    auto dst = g_backend->allocate(weight_bytes);
    if (dst) {
      l.dst = *dst;
      t0 = std::chrono::steady_clock::now();
      Status st = g_backend->launch(l);
      if (st) st = g_backend->synchronize();
      kernel_ms = ms_since(t0);
      std::vector<float> got(rows * cols);
      if (st) st = g_backend->copy_to_host(std::as_writable_bytes(std::span(got)), *dst, 0);
      if (st) {
        ok = true;
        for (std::uint64_t r = 0; r < rows && ok; ++r)
          for (std::uint64_t c = 0; c < cols; ++c) {
            float want;
            std::memcpy(&want, host + offset + (r * cols + c) * 4, 4);
            if (std::memcmp(&got[c * rows + r], &want, 4) != 0) {
              ok = false;
              std::printf("registration: transposed weight differs at (%llu, %llu)\n", static_cast<unsigned long long>(r),
                          static_cast<unsigned long long>(c));
              break;
            }
          }
      } else {
        std::printf("registration: transpose through the registration failed: %s\n", st.to_string().c_str());
      }
      (void)g_backend->free(*dst);
    } else {
      std::printf("registration: allocate: %s\n", dst.error().to_string().c_str());
    }
  }
  t0 = std::chrono::steady_clock::now();
  const Status un = g_backend->unregister_host(*reg);
  const double unregister_ms = ms_since(t0);
  munmap(map, bytes);
  std::printf("registration: %llu MiB read-only file mapping registered whole in %.1f ms (%.1f GB/s), "
              "unregistered in %.1f ms%s\n",
              static_cast<unsigned long long>(mib), register_ms, static_cast<double>(bytes) / register_ms / 1e6,
              unregister_ms, un ? "" : (" (unregister failed: " + un.to_string() + ")").c_str());
  std::printf("registration: transpose of a %llu MiB f32 weight at offset %llu through it: %.3f ms (%.1f GB/s read+written), "
              "result %s\n",
              static_cast<unsigned long long>(weight_bytes >> 20), static_cast<unsigned long long>(offset), kernel_ms,
              kernel_ms > 0 ? 2.0 * static_cast<double>(weight_bytes) / kernel_ms / 1e6 : 0.0,
              ok ? "matches the host transpose" : "WRONG or not computed");
  return ok && un.ok();
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t register_mib = 0, llc_mib = 0;
  int paired_rounds = 0;
  std::string filter;
  const std::string config = take_flags(argc, argv, register_mib, llc_mib, paired_rounds, filter);
  auto opened = open_backend(config);
  if (!opened) {
    std::fprintf(stderr, "bench_derive: cannot open backend '%s': %s\n", config.c_str(), opened.error().to_string().c_str());
    return 2;
  }
  g_backend = std::move(opened.value());
  std::printf("backend: %s (%s, %s)\n", config.c_str(), g_backend->info().name.c_str(), g_backend->info().uuid.c_str());
  // The CPU backend names the kernel table it chose (AVX-512, AVX2 or
  // portable: backends/cpu/backend.hpp's kernel-set extension), so a
  // figure says which path made it.
  if (const void* set = g_backend->extension("ballast_cpu_kernel_set"))
    std::printf("kernels: %s\n", static_cast<const char*>(set));

  // A GPU's own cache is not read here (a GPU's L2 is 40-60 MB on the
  // NVIDIA parts this project meets): off the CPU backend, at least 64 MiB.
  // (lavapipe, Mesa's Vulkan on the CPU, shares the host's caches.)
  const bool on_cpu = config.rfind("cpu", 0) == 0 || g_backend->info().name.rfind("llvmpipe", 0) == 0;
  const std::uint64_t llc = llc_mib != 0 ? llc_mib << 20
                            : on_cpu      ? last_level_cache_bytes()
                                          : std::max<std::uint64_t>(last_level_cache_bytes(), std::uint64_t{64} << 20);
  std::printf("last-level cache: %.1f MiB%s; cases move >= %.0f MiB (past) and <= %.1f MiB (in)\n",
              static_cast<double>(llc) / (1 << 20), llc_mib != 0 ? " (--llc-mib)" : "",
              4.0 * static_cast<double>(llc) / (1 << 20), 0.25 * static_cast<double>(llc) / (1 << 20));
  std::vector<Case> all;
  for (const Case& c : cases()) {
    all.push_back(scaled(c, 4 * llc + (8ull << 20), "past"));
    all.push_back(scaled(c, llc / 4, "in"));
  }
  if (paired_rounds > 0) {
    // The built-in CPU backend's device pointers are host addresses (not a
    // plugin's whose config merely starts with "cpu").
    if (g_backend->info().backend == "cpu")
      g_stream = std::make_unique<bench::TrafficStream>(bench::cpu_backend_threads(config.c_str()));
    const bool ran = run_paired(all, filter, paired_rounds);
    g_stream.reset();
    g_backend.reset();
    return ran ? 0 : 1;
  }
  for (const Case& c : all) {
    benchmark::RegisterBenchmark(("derive/" + c.name).c_str(), bench_derivation, c)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("memcpy/" + c.name).c_str(), bench_copy, c)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  g_buffers.release();

  std::printf("\n%-60s %10s %10s %7s %7s\n", "derivation", "GB/s", "copy GB/s", "ratio", "target");
  bool all_met = true;
  for (const Case& c : all) {
    const double d = median(reporter.runs_of["derive/" + c.name]), m = median(reporter.runs_of["memcpy/" + c.name]);
    if (d <= 0 || m <= 0) continue;
    const double ratio = d / m;
    // The targets are for memory-bound sizes: an in-cache copy may run at
    // several times memory speed, and the ratio there is for reading only.
    const bool judged = c.name.rfind("past/", 0) == 0;
    if (judged) all_met = all_met && ratio >= c.target;
    std::printf("%-60s %10.2f %10.2f %7.2f %6.1fx%s\n", c.name.c_str(), d / 1e9, m / 1e9, ratio, c.target,
                !judged ? "  (in cache: not judged)" : ratio >= c.target ? "" : "  BELOW TARGET");
  }
  std::printf("%s\n", all_met ? "all ratios meet their targets" : "some ratios are below target");
  benchmark::Shutdown();
  const bool registration_ok = register_mib == 0 || measure_registration(register_mib);
  g_backend.reset();
  return registration_ok ? 0 : 1;
}
