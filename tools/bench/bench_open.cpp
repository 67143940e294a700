// bench_open: opening a model must not touch weight bytes.
//
// Measures load_onnx on a generated model with 10,000 initializers and 4 GiB
// of (sparse) external data against the same structure with 4 MiB, and
// onnx.load(path, load_external_data=False) on the same file in the same run
// (a python subprocess that reports its in-process time). Then runs
// `ballast inspect` on the big model as a child and reports its peak resident
// memory against the bound 64 MiB + 2 x the .onnx size. The models are
// generated into the build folder on first run (tools/gen/make_big_model.py).
#include <ballast/onnx_loader.hpp>

#include <benchmark/benchmark.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
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

std::optional<ChildResult> run_child(const std::vector<std::string>& args, std::string* captured) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
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
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawned != 0) {
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
  if (wait4(pid, &r.status, 0, &r.usage) != pid) return std::nullopt;
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

std::optional<Timing> onnx_load_time(const fs::path& model) {
  std::string out;
  auto r = run_child({BALLAST_BENCH_PYTHON, std::string(BALLAST_SOURCE_DIR) + "/tools/bench/time_onnx_load.py",
                      model.string(), "--repeat", "20"},
                     &out);
  if (!r || !WIFEXITED(r->status) || WEXITSTATUS(r->status) != 0) return std::nullopt;
  const Timing t{json_number(out, "mean_s"), json_number(out, "cpu_mean_s")};
  if (t.wall_s <= 0 || t.cpu_s <= 0) return std::nullopt;
  return t;
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
  auto ratios = [](const char* label, Timing a, Timing b, double target) {
    const double wall = a.wall_s / b.wall_s;
    const double cpu = a.cpu_s / b.cpu_s;
    std::printf("%s = %.3f wall (%s), %.3f CPU (%s); target <= %.1f\n", label, wall, verdict(wall <= target), cpu,
                verdict(cpu <= target), target);
  };
  const auto t_big = find("BM_load_onnx/4GiB");
  const auto t_small = find("BM_load_onnx/4MiB");
  if (t_big && t_small) {
    std::printf("ballast load_onnx, 4 GiB external: %.3f ms wall, %.3f ms CPU\n", t_big->wall_s * 1e3,
                t_big->cpu_s * 1e3);
    std::printf("ballast load_onnx, 4 MiB external: %.3f ms wall, %.3f ms CPU\n", t_small->wall_s * 1e3,
                t_small->cpu_s * 1e3);
    ratios("open_4GiB / open_4MiB", *t_big, *t_small, 1.2);
  }
  if (const auto py = onnx_load_time(big); py && t_big) {
    std::printf("onnx.load(load_external_data=False), 4 GiB model: %.3f ms wall, %.3f ms CPU (%s, in-process, mean of 20)\n",
                py->wall_s * 1e3, py->cpu_s * 1e3, BALLAST_BENCH_PYTHON);
    ratios("ballast_open / onnx_load", *t_big, *py, 0.5);
  } else {
    std::printf("onnx.load timing unavailable (python with onnx at %s?)\n", BALLAST_BENCH_PYTHON);
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

int main(int argc, char** argv) {
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
  report(reporter);
  return 0;
}
