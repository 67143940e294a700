// bench_open: opening a model must not touch weight bytes.
//
// Measures load_onnx on a generated model with 10,000 initializers and 4 GiB
// of (sparse) external data against the same structure with 4 MiB, and
// onnx.load(path, load_external_data=False) on the same file in the same run.
// The Google Benchmark entries give each figure on its own; the targets are
// judged on interleaved rounds (a batch of each of the three per round, the
// onnx.load batch timed inside a python process that stays up for the whole
// run), as the median of the per-round ratios: on a shared machine the load
// drifts over seconds, and interleaving makes the drift hit both sides of
// every ratio. Then runs `ballast inspect` on the big model as a child and
// reports its peak resident memory against the bound 64 MiB + 2 x the .onnx
// size. The models are generated into the build folder on first run
// (tools/gen/make_big_model.py).
#include <ballast/onnx_loader.hpp>

#include <benchmark/benchmark.h>

#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kInitializers = 10000;
constexpr std::uint64_t kBigBytes = std::uint64_t{4} << 30;
constexpr std::uint64_t kSmallBytes = std::uint64_t{4} << 20;
constexpr int kRounds = 40;
constexpr int kPerBatch = 5;

fs::path model_path(std::uint64_t external_bytes) {
  return fs::path(BALLAST_BENCH_MODEL_DIR) /
         ("big_" + std::to_string(kInitializers) + "_" + std::to_string(external_bytes) + ".onnx");
}

// Runs argv to completion; its stdout goes to `stdout_to` (or is captured
// into `captured` when that is non-null). Returns the exit status and usage.
struct ChildResult {
  int status = -1;
  struct rusage usage {};
};

// Starts args[0] with these file actions; nullopt when it cannot start.
std::optional<pid_t> spawn(const std::vector<std::string>& args, const posix_spawn_file_actions_t& actions) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) return std::nullopt;
  return pid;
}

std::optional<ChildResult> run_child(const std::vector<std::string>& args, std::string* captured) {
  int pipe_fds[2] = {-1, -1};
  if (pipe(pipe_fds) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (captured) {
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  const auto pid = spawn(args, actions);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (!pid) {
    close(pipe_fds[0]);
    return std::nullopt;
  }
  char buf[4096];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof buf)) > 0) {
    if (captured) captured->append(buf, static_cast<std::size_t>(n));
  }
  close(pipe_fds[0]);
  ChildResult r;
  if (wait4(*pid, &r.status, 0, &r.usage) != *pid) return std::nullopt;
  return r;
}

bool ensure_model(std::uint64_t external_bytes) {
  const fs::path path = model_path(external_bytes);
  if (fs::exists(path)) return true;
  std::fprintf(stderr, "bench_open: generating %s (first run)\n", path.c_str());
  std::string out;
  auto r = run_child({BALLAST_BENCH_PYTHON, std::string(BALLAST_SOURCE_DIR) + "/tools/gen/make_big_model.py",
                      BALLAST_BENCH_MODEL_DIR, "--initializers", std::to_string(kInitializers), "--external-bytes",
                      std::to_string(external_bytes)},
                     &out);
  return r && WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 && fs::exists(path);
}

void BM_load_onnx(benchmark::State& state, std::uint64_t external_bytes) {
  const fs::path path = model_path(external_bytes);
  for (auto _ : state) {
    std::optional<ballast::Result<ballast::Model>> model(ballast::load_onnx(path));
    if (!*model) {
      state.SkipWithError(model->error().to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize((*model)->weight_order().size());
    // Teardown is not opening: onnx.load's timing excludes freeing its proto too.
    state.PauseTiming();
    model.reset();
    state.ResumeTiming();
  }
  state.counters["initializers"] = static_cast<double>(kInitializers);
  state.counters["external_bytes"] = static_cast<double>(external_bytes);
}

struct Timing {
  double wall_s = 0;
  double cpu_s = 0;
};

// Keeps each run's mean wall and CPU time per iteration by name, and prints
// as usual. Both matter: on a loaded machine wall time mostly measures the
// scheduler, CPU time the work.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, Timing> timings;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const double unit = benchmark::GetTimeUnitMultiplier(run.time_unit);
      timings[run.benchmark_name()] = {run.GetAdjustedRealTime() / unit, run.GetAdjustedCPUTime() / unit};
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

double json_number(const std::string& text, const std::string& key) {
  const auto at = text.find("\"" + key + "\":");
  return at == std::string::npos ? -1.0 : std::strtod(text.c_str() + at + key.size() + 3, nullptr);
}

// A python process that times onnx.load in batches when asked
// (tools/bench/time_onnx_load.py), up for the whole run.
class OnnxLoadServer {
 public:
  static std::unique_ptr<OnnxLoadServer> start(const fs::path& model) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0) return nullptr;
    if (pipe(from_child) != 0) {
      close(to_child[0]);
      close(to_child[1]);
      return nullptr;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, to_child[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], STDOUT_FILENO);
    for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) posix_spawn_file_actions_addclose(&actions, fd);
    const auto pid = spawn({BALLAST_BENCH_PYTHON, std::string(BALLAST_SOURCE_DIR) + "/tools/bench/time_onnx_load.py",
                            model.string()},
                           actions);
    posix_spawn_file_actions_destroy(&actions);
    close(to_child[0]);
    close(from_child[1]);
    if (!pid) {
      close(to_child[1]);
      close(from_child[0]);
      return nullptr;
    }
    FILE* to = fdopen(to_child[1], "w");
    FILE* from = fdopen(from_child[0], "r");
    if (!to) close(to_child[1]);
    if (!from) close(from_child[0]);
    // The destructor closes what opened and reaps the child either way.
    auto server = std::unique_ptr<OnnxLoadServer>(new OnnxLoadServer(*pid, to, from));
    if (!to || !from || server->read_line().find("\"ready\"") == std::string::npos) return nullptr;
    return server;
  }

  ~OnnxLoadServer() {
    if (to_) {
      std::fputs("\n", to_);
      std::fclose(to_);
    }
    if (from_) std::fclose(from_);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  // Total wall and CPU time of `count` loads.
  std::optional<Timing> batch(int count) {
    // A python that died shows as a failed write (SIGPIPE is ignored in main).
    if (std::fprintf(to_, "%d\n", count) < 0 || std::fflush(to_) != 0) return std::nullopt;
    const std::string line = read_line();
    const Timing t{json_number(line, "wall_s"), json_number(line, "cpu_s")};
    if (t.wall_s <= 0 || t.cpu_s <= 0) return std::nullopt;
    return t;
  }

 private:
  OnnxLoadServer(pid_t pid, FILE* to, FILE* from) : pid_(pid), to_(to), from_(from) {}
  std::string read_line() {
    std::string line;
    if (!from_) return line;
    for (int c; (c = std::fgetc(from_)) != EOF && c != '\n';) line.push_back(static_cast<char>(c));
    return line;
  }
  pid_t pid_;
  FILE* to_;
  FILE* from_;
};

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Total wall and CPU time of `count` opens (freeing the model not counted).
// With `tables`, each open is followed by the first nodes() and value_id()
// calls, which build what opening defers: the full cost for an engine that
// wants every node and every value's id (onnx.load builds all of that).
std::optional<Timing> ballast_batch(const fs::path& model, int count, bool tables = false) {
  Timing total;
  for (int i = 0; i < count; ++i) {
    const auto w0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    auto opened = ballast::load_onnx(model);
    if (tables && opened) {
      benchmark::DoNotOptimize(opened->nodes().size());
      benchmark::DoNotOptimize(opened->value_id("x0"));
    }
    const double c1 = process_cpu_seconds();
    const auto w1 = std::chrono::steady_clock::now();
    if (!opened) return std::nullopt;
    total.wall_s += std::chrono::duration<double>(w1 - w0).count();
    total.cpu_s += c1 - c0;
  }
  return total;
}

// The q-quantile (0..1) by linear interpolation between order statistics.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }

// Rounds of (onnx.load batch, 4 GiB opens, 4 MiB opens).
struct Interleaved {
  int rounds = 0;
  int per_batch = 0;
  Timing big, small, python, big_tables;  // medians per open
  Timing big_over_small, big_over_python, tables_over_python;  // medians of the per-round ratios
  // Quartiles of the per-round CPU ratios: how much one round says.
  double big_over_small_q1 = 0, big_over_small_q3 = 0, big_over_python_q1 = 0, big_over_python_q3 = 0;
};

std::optional<Interleaved> interleaved_rounds(int rounds, int per_batch) {
  auto server = OnnxLoadServer::start(model_path(kBigBytes));
  if (!server) return std::nullopt;
  std::vector<double> bw, bc, sw, sc, pw, pc, tw, tc, r_bs_w, r_bs_c, r_bp_w, r_bp_c, r_tp_w, r_tp_c;
  for (int r = 0; r < rounds; ++r) {
    // python, then the two ballast batches in alternating order: each
    // ballast batch follows python (cold caches) in half of the rounds.
    std::optional<Timing> t[4];
    t[2] = server->batch(per_batch);
    for (int k = 0; k < 2; ++k) {
      const bool big = (r + k) % 2 == 0;
      t[big ? 0 : 1] = ballast_batch(model_path(big ? kBigBytes : kSmallBytes), per_batch);
    }
    t[3] = ballast_batch(model_path(kBigBytes), per_batch, true);  // informational, after the judged pair
    if (!t[0] || !t[1] || !t[2] || !t[3]) return std::nullopt;
    tw.push_back(t[3]->wall_s / per_batch);
    tc.push_back(t[3]->cpu_s / per_batch);
    r_tp_w.push_back(t[3]->wall_s / t[2]->wall_s);
    r_tp_c.push_back(t[3]->cpu_s / t[2]->cpu_s);
    bw.push_back(t[0]->wall_s / per_batch);
    bc.push_back(t[0]->cpu_s / per_batch);
    sw.push_back(t[1]->wall_s / per_batch);
    sc.push_back(t[1]->cpu_s / per_batch);
    pw.push_back(t[2]->wall_s / per_batch);
    pc.push_back(t[2]->cpu_s / per_batch);
    r_bs_w.push_back(t[0]->wall_s / t[1]->wall_s);
    r_bs_c.push_back(t[0]->cpu_s / t[1]->cpu_s);
    r_bp_w.push_back(t[0]->wall_s / t[2]->wall_s);
    r_bp_c.push_back(t[0]->cpu_s / t[2]->cpu_s);
  }
  Interleaved out;
  out.rounds = rounds;
  out.per_batch = per_batch;
  out.big = {median(bw), median(bc)};
  out.small = {median(sw), median(sc)};
  out.python = {median(pw), median(pc)};
  out.big_over_small = {median(r_bs_w), median(r_bs_c)};
  out.big_over_python = {median(r_bp_w), median(r_bp_c)};
  out.big_over_small_q1 = quantile(r_bs_c, 0.25);
  out.big_over_small_q3 = quantile(r_bs_c, 0.75);
  out.big_over_python_q1 = quantile(r_bp_c, 0.25);
  out.big_over_python_q3 = quantile(r_bp_c, 0.75);
  out.big_tables = {median(tw), median(tc)};
  out.tables_over_python = {median(r_tp_w), median(r_tp_c)};
  return out;
}

// Peak resident set of a child, in bytes (Linux reports ru_maxrss in KiB).
std::optional<double> child_peak_rss(const std::vector<std::string>& args) {
  auto r = run_child(args, nullptr);
  if (!r || !WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) return std::nullopt;
  return static_cast<double>(r->usage.ru_maxrss) * 1024.0;
}

const char* verdict(bool ok) { return ok ? "meets target" : "MISSES target"; }

void report(const RecordingReporter& rec) {
  const double mib = 1024.0 * 1024.0;
  const fs::path big = model_path(kBigBytes);
  std::printf("\n== bench_open summary (%llu initializers; .onnx %.2f MiB) ==\n",
              static_cast<unsigned long long>(kInitializers), static_cast<double>(fs::file_size(big)) / mib);
  auto find = [&rec](const std::string& prefix) -> std::optional<Timing> {
    for (const auto& [name, t] : rec.timings) {
      if (name.rfind(prefix, 0) == 0) return t;
    }
    return std::nullopt;
  };
  const auto t_big = find("BM_load_onnx/4GiB");
  const auto t_small = find("BM_load_onnx/4MiB");
  if (t_big && t_small) {
    std::printf("Google Benchmark, each on its own: load_onnx 4 GiB %.3f ms, 4 MiB %.3f ms (wall)\n",
                t_big->wall_s * 1e3, t_small->wall_s * 1e3);
  }

  auto ratio = [](const char* label, Timing r, double target) {
    std::printf("%s = %.3f wall (%s), %.3f CPU (%s); target <= %.1f\n", label, r.wall_s, verdict(r.wall_s <= target),
                r.cpu_s, verdict(r.cpu_s <= target), target);
  };
  const auto il = interleaved_rounds(kRounds, kPerBatch);
  if (il) {
    std::printf("interleaved: %d rounds x %d opens of each, medians:\n", il->rounds, il->per_batch);
    std::printf("ballast load_onnx, 4 GiB external: %.3f ms wall, %.3f ms CPU\n", il->big.wall_s * 1e3,
                il->big.cpu_s * 1e3);
    std::printf("ballast load_onnx, 4 MiB external: %.3f ms wall, %.3f ms CPU\n", il->small.wall_s * 1e3,
                il->small.cpu_s * 1e3);
    std::printf("onnx.load(load_external_data=False), 4 GiB model: %.3f ms wall, %.3f ms CPU (%s, in-process)\n",
                il->python.wall_s * 1e3, il->python.cpu_s * 1e3, BALLAST_BENCH_PYTHON);
    ratio("open_4GiB / open_4MiB", il->big_over_small, 1.2);
    std::printf("  per-round CPU ratio quartiles %.3f .. %.3f\n", il->big_over_small_q1, il->big_over_small_q3);
    ratio("ballast_open / onnx_load", il->big_over_python, 0.5);
    std::printf("  per-round CPU ratio quartiles %.3f .. %.3f\n", il->big_over_python_q1, il->big_over_python_q3);
    std::printf("for information, open + first nodes() + value_id() (builds the deferred tables): %.3f ms CPU, "
                "%.3f of onnx.load (CPU; no target)\n",
                il->big_tables.cpu_s * 1e3, il->tables_over_python.cpu_s);
  } else {
    std::printf("interleaved timing unavailable (python with onnx at %s?)\n", BALLAST_BENCH_PYTHON);
  }

  const auto baseline = child_peak_rss({BALLAST_CLI_PATH, "--version"});
  const auto table = child_peak_rss({BALLAST_CLI_PATH, "inspect", big.string()});
  const auto json = child_peak_rss({BALLAST_CLI_PATH, "inspect", "--json", big.string()});
  if (baseline && table && json) {
    const double bound = 64 * mib + 2.0 * static_cast<double>(fs::file_size(big));
    std::printf("ballast --version peak RSS %.2f MiB (baseline)\n", *baseline / mib);
    for (const auto& [label, peak] : {std::pair{"inspect", *table}, std::pair{"inspect --json", *json}}) {
      const double growth = peak - *baseline;
      std::printf("ballast %s on the 4 GiB model: peak RSS %.2f MiB, growth %.2f MiB (bound %.2f MiB: %s)\n", label,
                  peak / mib, growth / mib, bound / mib, verdict(growth <= bound));
    }
  } else {
    std::printf("inspect RSS unavailable (%s failed)\n", BALLAST_CLI_PATH);
  }
}

}  // namespace

// Pins this process, and so the python server it spawns, to the CPU it is
// running on: on a shared virtual machine each virtual CPU sees its own
// neighbours' load, and the two sides of a ratio should see the same.
int pin_to_current_cpu() {
  const int cpu = sched_getcpu();
  if (cpu < 0) return -1;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0 ? cpu : -1;
}

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);  // a python server that dies must not kill the report
  if (!ensure_model(kBigBytes) || !ensure_model(kSmallBytes)) {
    std::fprintf(stderr, "bench_open: cannot generate the benchmark models in %s\n", BALLAST_BENCH_MODEL_DIR);
    return 1;
  }
  benchmark::RegisterBenchmark("BM_load_onnx/4GiB", BM_load_onnx, kBigBytes)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("BM_load_onnx/4MiB", BM_load_onnx, kSmallBytes)->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  const int cpu = pin_to_current_cpu();
  if (cpu >= 0) std::printf("\n(interleaved rounds pinned to CPU %d, python server included)\n", cpu);
  report(reporter);
  return 0;
}
