// ballast load MODEL --backend NAME [--residency S] [--budget B] [--cold]
// [--mmap] [--anchor] [--plan] [--engine E] [--queue-depth N] [--chunk-mib N]
// [--staging N] [--direct-io|--buffered] [--keep-cache] [--read-cached] [--json]:
// the time from opening a model to every planned derivation on the device,
// and what was read to get there. By default through Residency::load()
// (explicit parallel reads, docs/loading.md); --mmap pins every value
// through the mappings instead (the page-fault path, for comparison).
// --cold drops the page cache of the model's files first (and the whole
// machine's when permitted, said which). --anchor then times the physical
// limit in the same run: the best of 1-16 threads of 8 MiB pread over the
// same bytes into fresh memory (cold when --cold), and the hot derive (the
// mmap path with every byte in the page cache). Schema: docs/tools.md.
#include "command.hpp"
#include "command_context.hpp"
#include "command_options.hpp"
#include "load_ranks.hpp"
#include "support/budget.hpp"
#include "support/format.hpp"
#include "support/residency_report.hpp"
#include "support/terminal.hpp"

#include <ballast/read_plan.hpp>
#include <ballast/residency.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

namespace ballast::cli {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

// The single-process path's options, which the cooperative load refuses:
// looked up by name when given, and listed so in its refusal.
constexpr std::array<const char*, 8> kSingleProcessOptions = {
    "--cold", "--plan", "--mmap", "--anchor", "--residency", "--budget", "--read-cached", "--populate-threads"};

struct LoadCommandOptions {
  std::string model;
  LoadOptions load;  // --allow-model-real-dir
  std::string backend = "cpu";
  std::string residency = "upload";
  std::string budget;
  std::string engine = "auto";
  std::uint32_t queue_depth = ReadOptions{}.queue_depth;
  std::uint64_t chunk_mib = ReadOptions{}.chunk_bytes >> 20;
  std::uint32_t staging = ReadOptions{}.staging_buffers;
  bool direct_io = ReadOptions{}.direct_io;
  bool buffered = false;  // --buffered: direct_io off (excludes --direct-io)
  bool keep_cache = false;
  bool read_cached = false;
  std::uint32_t populate_threads = ResidencyLoadOptions{}.populate_threads;
  bool cold = false;
  bool mmap = false;
  bool anchor = false;
  bool plan_only = false;
  bool json = false;
  // The cooperative load of tensor-parallel shards (load_ranks.hpp).
  CommOptions comm;
  bool comm_given = false;
  // The first single-process option given on the command line at all
  // (CLI11's count), whatever its value: --residency upload or
  // --populate-threads 0 beside --comm are refused as any other value is,
  // not let through for equalling the default.
  std::string single_process_given;
  std::string dump;
};

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Drops the page cache: each of the model's files, then, when this
// process may, the machine's clean pages (/proc/sys/vm/drop_caches).
// Returns how ("files" or "files+machine").
Result<std::string> drop_caches(const WeightStore& store) {
  BALLAST_RETURN_IF_ERROR(drop_page_cache(store), "dropping the page cache of the model's files");
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (f && (f << "1" << std::flush)) return std::string("files+machine");
  return std::string("files");
}

// The model on the device, every planned value, by one path; seconds.
struct Run {
  double seconds = 0;
  std::optional<CachePolicy> cache;  // the read path's page cache policy
  std::optional<ResidencyLoadReport> report;  // the read path's
  ResidencyStats stats;
};

Result<Run> run_once(const LoadCommandOptions& opt, GpuBackend& gpu, const ResidencyOptions& ro,
                     const ResidencyLoadOptions& lo, bool mmap, std::string* cold_how) {
  Run run;
  if (cold_how != nullptr) {
    auto probe = open_model(opt.model, opt.load);
    if (!probe.ok()) return probe.error();
    BALLAST_ASSIGN_OR_RETURN(*cold_how, drop_caches(probe->store()));
  }
  const auto start = Clock::now();
  auto model = open_model(opt.model, opt.load);
  if (!model.ok()) return model.error();
  // The label opens the load's errors ("loading <label>: ..."): the model's
  // file name is what is being loaded (the label "load" read "loading load").
  BALLAST_ASSIGN_OR_RETURN(auto residency,
                           Residency::create(gpu, *model, ro, std::filesystem::path(opt.model).filename().string()));
  if (mmap) {
    // Today's path: each value pinned once, its bytes faulted in through the mapping.
    std::vector<PlannedDerivation> plan(residency->plan().begin(), residency->plan().end());
    if (plan.empty()) {
      BALLAST_ASSIGN_OR_RETURN(auto planned, plan_derivations(*model));
      plan = apply_policy(planned, ro.policy);
    }
    for (const PlannedDerivation& p : plan) {
      auto pin = residency->pin(p);
      if (!pin.ok()) return std::move(pin.error()).with_context("pinning");
    }
    for (ValueId id : model->weight_order()) {
      if (!model->store().weights().contains(id)) continue;
      auto pin = residency->pin(id);
      if (!pin.ok()) return std::move(pin.error()).with_context("pinning");
    }
  } else {
    // The page cache policy is the library's own (automatic) unless
    // --keep-cache: docs/loading.md, "Cache policy".
    BALLAST_ASSIGN_OR_RETURN(run.report, residency->load(lo));
    run.cache = run.report->cache;
  }
  BALLAST_RETURN_IF_ERROR(gpu.synchronize());
  run.seconds = since(start);
  run.stats = residency->stats();
  BALLAST_RETURN_IF_ERROR(residency->release(gpu).status, "releasing");
  return run;
}

// The best of 1..16 threads of 8 MiB preads of `plan` into fresh memory.
struct ReadAnchor {
  double seconds = 0;
  std::uint32_t threads = 0;
  std::vector<std::pair<std::uint32_t, double>> trials;
};

Result<ReadAnchor> measure_read_anchor(const LoadCommandOptions& opt, const ReadPlan& plan) {
  constexpr std::uint64_t kPiece = 8ull << 20;
  struct Piece {
    std::string path;
    std::uint64_t offset, length;
  };
  std::vector<Piece> pieces;
  for (const ReadPlanFile& f : plan.files())
    for (const ReadRange& r : f.ranges)
      for (std::uint64_t at = 0; at < r.length; at += kPiece)
        pieces.push_back({f.path.string(), r.offset + at, std::min(kPiece, r.length - at)});
  ReadAnchor best;
  for (std::uint32_t threads : {1u, 2u, 4u, 8u, 16u}) {
    if (opt.cold) {
      auto model = open_model(opt.model, opt.load);
      if (!model.ok()) return model.error();
      BALLAST_ASSIGN_OR_RETURN(std::string how, drop_caches(model->store()));
    }
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    for (std::uint32_t t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        std::string open_path;
        int fd = -1;
        for (std::size_t i; (i = next++) < pieces.size();) {
          const Piece& p = pieces[i];
          if (p.path != open_path) {
            if (fd >= 0) ::close(fd);
            fd = ::open(p.path.c_str(), O_RDONLY | O_CLOEXEC);
            open_path = p.path;
          }
          auto buffer = std::make_unique_for_overwrite<std::byte[]>(p.length);  // fresh memory, as a load's
          for (std::uint64_t done = 0; done < p.length;) {
            const ssize_t n = fd < 0 ? -1 : ::pread(fd, buffer.get() + done, p.length - done, static_cast<off_t>(p.offset + done));
            if (n <= 0) {
              failed = true;
              break;
            }
            done += static_cast<std::uint64_t>(n);
          }
        }
        if (fd >= 0) ::close(fd);
      });
    for (std::thread& t : pool) t.join();
    const double seconds = since(start);
    if (failed) return make_error(ErrorCode::io, "the anchor's reads of the model's files failed");
    best.trials.emplace_back(threads, seconds);
    if (best.threads == 0 || seconds < best.seconds) best = {seconds, threads, best.trials};
  }
  return best;
}

json report_json(const ResidencyLoadReport& r) {
  return {{"planned_bytes", r.planned_bytes},
          {"planned_ranges", r.planned_ranges},
          {"planned_files", r.planned_files},
          {"read",
           {{"engine", std::string(read_engine_name(r.read.engine))},
            {"bytes", r.read.bytes},
            {"io_bytes", r.read.io_bytes},
            {"reads", r.read.reads},
            {"chunks", r.read.chunks},
            {"files", r.read.files},
            {"direct_files", r.read.direct_files},
            {"mapped_files", r.read.mapped_files},
            {"staging_bytes", r.read.staging_bytes},
            {"peak_staging_in_use", r.read.peak_staging_in_use},
            {"seconds", r.read.seconds},
            {"consumer_seconds", r.read.consumer_seconds}}},
          {"sources_read", r.sources_read},
          {"sources_cached", r.sources_cached},
          {"cached_bytes", r.cached_bytes},
          {"inline_sources", r.inline_sources},
          {"zero_copy_weights", r.zero_copy_weights},
          {"populated_bytes", r.populated_bytes},
          {"zero_copy_uploads", r.zero_copy_uploads},
          {"derived_built", r.derived_built},
          {"already_resident", r.already_resident},
          {"left_for_demand", r.left_for_demand},
          {"left_bytes", r.left_bytes},
          {"seconds", r.seconds}};
}

int run_load(const LoadCommandOptions& opt) {
  CommandContext ctx("load");
  auto ro = residency_options(opt.residency, opt.budget);
  if (!ro.ok()) return ctx.fail(ro.error());
  ResidencyLoadOptions lo;
  lo.read.engine = opt.engine == "io_uring" ? ReadEngine::io_uring
                   : opt.engine == "threads" ? ReadEngine::threads
                                             : ReadEngine::automatic;
  lo.read.queue_depth = opt.queue_depth;
  lo.read.chunk_bytes = opt.chunk_mib << 20;
  lo.read.staging_buffers = opt.staging;
  lo.read.direct_io = opt.direct_io && !opt.buffered;
  // Without --keep-cache the library decides (Residency::load(): kept for
  // a paged budget that leaves values for demand) and reports it.
  lo.read.cache = opt.keep_cache ? CachePolicy::keep : CachePolicy::automatic;
  lo.read_cached = opt.read_cached;
  lo.populate_threads = opt.populate_threads;
  if (opt.comm_given) {
    // The cooperative load has its own report: the single-process path's
    // options would be ignored there, so they are refused.
    if (!opt.single_process_given.empty()) {
      std::string names;
      for (const char* name : kSingleProcessOptions) names += (names.empty() ? "" : ", ") + std::string(name);
      return ctx.fail(ErrorCode::invalid_argument,
                      "--comm takes none of " + names + " (given: " + opt.single_process_given +
                          "; the cooperative load reads cold by design: drop the page cache before it to measure one)");
    }
    RanksOptions ranks;
    ranks.model = opt.model;
    ranks.load = opt.load;
    ranks.backend = opt.backend;
    ranks.comm = opt.comm;
    ranks.dump = opt.dump;
    ranks.json = opt.json;
    ranks.read = lo.read;
    return run_load_ranks(ranks);
  }
  if (!ctx.load_model(opt.model, opt.load)) return ctx.exit_code();
  // What the files hold that a load must read: the referenced bytes.
  const std::uint64_t referenced = ctx.model().store().referenced_weight_bytes().total;
  const ReadPlan whole = ReadPlan::of(ctx.model().store());
  if (opt.plan_only) {
    // The read plan itself: what a cold load of every weight reads, file by file.
    if (!opt.json) {
      std::cout << whole.to_string() << "\n";
      return kExitOk;
    }
    json files = json::array();
    for (const ReadPlanFile& f : whole.files()) {
      json ranges = json::array();
      for (const ReadRange& r : f.ranges) ranges.push_back({{"offset", r.offset}, {"length", r.length}});
      files.push_back({{"path", f.path.string()}, {"file_bytes", f.file_bytes}, {"read_bytes", f.read_bytes}, {"ranges", ranges}});
    }
    const json doc = {
        {"model", ctx.model().path().string()}, {"referenced_bytes", referenced},    {"bytes", whole.bytes()},
        {"ranges", whole.range_count()},        {"weights", whole.weights().size()}, {"files", files}};
    std::cout << json_text(doc) << "\n";
    return kExitOk;
  }
  if (!ctx.open_backend(opt.backend)) return ctx.exit_code();
  GpuBackend& gpu = ctx.gpu();
  TeardownCheck check;
  check.baseline = gpu.counters();
  std::string cold_how;
  auto run = run_once(opt, gpu, *ro, lo, opt.mmap, opt.cold ? &cold_how : nullptr);
  if (!run.ok()) return ctx.fail(run.error());
  std::optional<ReadAnchor> anchor;
  std::optional<double> hot;
  if (opt.anchor) {
    auto a = measure_read_anchor(opt, whole);
    if (!a.ok()) return ctx.fail(a.error());
    anchor = *a;
    // The last anchor trial left every byte in the page cache: the mmap
    // path now faults nothing from storage, so this is the derive alone.
    auto h = run_once(opt, gpu, *ro, lo, /*mmap=*/true, nullptr);
    if (!h.ok()) return ctx.fail(h.error());
    hot = h->seconds;
  }
  check.after = gpu.counters();
  const char* path = opt.mmap ? "mmap" : "read";
  if (opt.json) {
    json doc = {{"model", ctx.model().path().string()},
                {"backend", gpu.info().backend},
                {"residency", opt.residency},
                {"path", path},
                {"cold", opt.cold},
                {"cache_dropped", cold_how},
                {"referenced_bytes", referenced},
                {"seconds", run->seconds},
                {"stats", residency_stats_json(run->stats)}};
    if (run->report) doc["load"] = report_json(*run->report);
    if (run->cache) doc["page_cache"] = *run->cache == CachePolicy::keep ? "keep" : "drop";
    if (anchor) {
      json trials = json::array();
      for (auto [threads, seconds] : anchor->trials) trials.push_back({{"threads", threads}, {"seconds", seconds}});
      doc["anchor"] = {{"read_seconds", anchor->seconds},
                       {"threads", anchor->threads},
                       {"trials", trials},
                       {"hot_derive_seconds", *hot},
                       {"ratio", (anchor->seconds + *hot) / run->seconds}};
    }
    std::cout << json_text(doc) << "\n";
  } else {
    std::printf("load of %s on %s: %s, %s path%s\n", opt.model.c_str(), gpu.info().backend.c_str(),
                opt.residency.c_str(), path, opt.cold ? (" (cold: page cache of " + cold_how + " dropped)").c_str() : "");
    std::printf("  referenced bytes %s; open to everything derived: %.3f s\n", human_bytes(referenced).c_str(),
                run->seconds);
    if (run->report)
      std::printf("  %s%s\n", run->report->to_string().c_str(),
                  run->report->read.bytes == 0            ? ""
                  : run->cache == CachePolicy::keep ? "; what it read kept in the page cache"
                                                    : "; what it read dropped from the page cache");
    std::printf("  %s\n", run->stats.to_string().c_str());
    if (anchor) {
      std::printf("  anchor: best read %.3f s (%u threads of 8 MiB pread, %.0f MB/s) + hot derive %.3f s = %.3f s; "
                  "ratio to this run %.2f\n",
                  anchor->seconds, anchor->threads, static_cast<double>(whole.bytes()) / anchor->seconds / 1e6, *hot,
                  anchor->seconds + *hot, (anchor->seconds + *hot) / run->seconds);
    }
  }
  if (check.after.live_allocations != check.baseline.live_allocations)
    return ctx.fail(ErrorCode::internal, "the device holds allocations the load did not give back", kExitVerifyFailed);
  return kExitOk;
}

const RegisterCommand kLoad{{
    "load",
    "Time MODEL from storage to every derivation on the device (cold with --cold), and what was read",
    [](CLI::App& sub) {
      auto opt = std::make_shared<LoadCommandOptions>();
      add_model_options(sub, opt->model, opt->backend);
      add_residency_options(sub, opt->residency, opt->budget);
      auto* cold = sub.add_flag("--cold", opt->cold,
                                "drop the page cache of the model's files (and the machine's, when permitted) first");
      auto* mmap = sub.add_flag("--mmap", opt->mmap,
                                "pin every value through the mappings instead of reading (today's page-fault path)");
      auto* anchor = sub.add_flag("--anchor", opt->anchor,
                                  "also time the best parallel pread of the same bytes and the hot derive");
      sub.add_option("--engine", opt->engine, "reads by io_uring, threads, or auto")
          ->check(CLI::IsMember({"auto", "io_uring", "threads"}))
          ->capture_default_str();
      // The library's own bounds (read_plan.hpp), so the command line and
      // the C API accept the same knobs.
      sub.add_option("--queue-depth", opt->queue_depth, "reads in flight")
          ->check(CLI::Range(std::uint32_t{1}, kMaxReadQueueDepth))
          ->capture_default_str();
      sub.add_option("--chunk-mib", opt->chunk_mib, "largest single read, MiB")
          ->check(CLI::Range(std::uint64_t{1}, kMaxReadChunkBytes >> 20))
          ->capture_default_str();
      sub.add_option("--staging", opt->staging, "staging buffers (each one chunk)")
          ->check(CLI::Range(std::uint32_t{1}, kMaxStagingBuffers))
          ->capture_default_str();
      // Two flags that exclude each other: given both, neither wins silently.
      auto* direct = sub.add_flag("--direct-io", opt->direct_io, "read with O_DIRECT where the file system takes it");
      sub.add_flag("--buffered", opt->buffered, "never read with O_DIRECT")->excludes(direct);
      sub.add_option("--populate-threads", opt->populate_threads,
                     "zero-copy: threads faulting pages in ahead (0, the default: one per hardware thread)")
          ->check(CLI::Range(0, 256))
          ->capture_default_str();
      sub.add_flag("--read-cached", opt->read_cached, "read what the page cache holds too (default: copy it from the mapping)");
      sub.add_flag("--keep-cache", opt->keep_cache, "leave what the read brought into the page cache (paged does when its budget cannot hold every value)");
      // --plan loads nothing: the flags that shape a load's run are refused beside it.
      sub.add_flag("--plan", opt->plan_only, "print the read plan (files, ranges, bytes) and load nothing")
          ->excludes(cold)
          ->excludes(mmap)
          ->excludes(anchor);
      add_model_real_dir_option(sub, opt->load);
      add_allow_holes_option(sub, opt->load);
      sub.add_flag("--json", opt->json,
                   "print the report as one JSON document (schema in docs/tools.md); with --comm, one per rank, a line each");
      auto* comm = add_comm_options(sub, opt->comm, "reads its part and gets its shards");
      sub.add_option("--dump", opt->dump, "write each rank's shards, read back from the device, to DIR/rank<R>/")
          ->type_name("DIR")
          ->needs(comm);
      return [opt, comm, app = &sub] {  // the subcommand lives as long as main's app
        opt->comm_given = comm->count() > 0;
        for (const char* name : kSingleProcessOptions)
          if (opt->single_process_given.empty() && app->get_option(name)->count() > 0) opt->single_process_given = name;
        return run_load(*opt);
      };
    },
}};

}  // namespace
}  // namespace ballast::cli
