// The cooperative load of `ballast load --comm` (load_ranks.hpp).
#include "load_ranks.hpp"

#include "command_context.hpp"
#include "support/derived_dump.hpp"
#include "support/format.hpp"
#include "support/npy.hpp"
#include "support/shard_rules_file.hpp"

#include <ballast/cooperative_load.hpp>
#include <ballast/shard.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <thread>

namespace ballast::cli {
namespace {

using json = nlohmann::ordered_json;

// The element size a NumPy type string names ("<f4": 4).
std::uint64_t descr_bytes(const std::string& descr) { return static_cast<std::uint64_t>(descr.back() - '0'); }

// One rank's shards on the device, read back for --dump; the device bytes placed.
Result<std::uint64_t> place(GpuBackend& gpu, const Model& model, const ShardPlan& plan, const RankShards& shards,
                            const std::string& dump) {
  std::optional<DumpDirectory> dir;
  if (!dump.empty()) {
    BALLAST_ASSIGN_OR_RETURN(DumpDirectory d, DumpDirectory::open(std::filesystem::path(dump) / ("rank" + std::to_string(plan.rank))));
    dir.emplace(std::move(d));
  }
  std::uint64_t placed = 0;
  for (std::size_t i = 0; i < plan.weights.size(); ++i) {
    const WeightShard& s = plan.weights[i];
    const std::vector<std::byte>& bytes = shards.shards[i];
    if (bytes.empty()) continue;
    BALLAST_ASSIGN_OR_RETURN(const DevicePtr ptr, gpu.allocate(bytes.size()), "placing the shard of '" + s.weight + "'");
    Status status = gpu.copy_to_device(ptr, 0, bytes);
    if (status.ok() && dir) {
      // What the device holds, not the host copy: the dump proves the placement.
      std::vector<std::byte> back(bytes.size());
      status = gpu.copy_to_host(back, ptr, 0);
      if (status.ok()) {
        const WeightRef& w = model.store().weights().at(s.id);
        std::string descr = npy_descr(w.dtype);
        std::vector<std::uint64_t> shape(s.dims.begin(), s.dims.end());
        std::uint64_t elements = 1;
        for (std::uint64_t d : shape) elements *= d;
        if (elements * descr_bytes(descr) != back.size()) {  // block types: their bytes
          descr = "|u1";
          shape = {back.size()};
        }
        auto written = dir->write_npy(s.weight, "shard", descr, shape, back);
        if (!written.ok()) status = written.status();
      }
    }
    const Status freed = gpu.free(ptr);
    BALLAST_RETURN_IF_ERROR(status, "placing the shard of '" + s.weight + "'");
    BALLAST_RETURN_IF_ERROR(freed);
    placed += bytes.size();
  }
  return placed;
}

json rank_json(const CooperativeLoadReport& r, std::uint64_t placed, std::size_t shards, const std::string& comm,
               std::uint32_t world) {
  return {{"rank", r.rank},
          {"world", world},
          {"comm", comm},
          {"read_bytes", r.read_bytes},
          {"kept_bytes", r.kept_bytes},
          {"sent_bytes", r.sent_bytes},
          {"received_bytes", r.received_bytes},
          {"inline_bytes", r.inline_bytes},
          {"messages_sent", r.messages_sent},
          {"messages_received", r.messages_received},
          {"shards", shards},
          {"device_bytes", placed},
          {"read_engine", std::string(read_engine_name(r.read.engine))},
          {"seconds", r.seconds}};
}

}  // namespace

int run_load_ranks(const RanksOptions& opt) {
  CommandContext ctx("load");
  // The ranks this process runs: all of them as threads, or its own.
  std::vector<std::unique_ptr<Communicator>> comms;
  std::uint32_t world = opt.world;
  if (opt.comm == "local") {
    if (world == 0) return ctx.fail("--comm local needs --world N: the number of ranks to run as threads");
    auto made = make_local_communicators(world);
    if (!made) return ctx.fail(made.error());
    comms = std::move(*made);
  } else {
    auto opened = open_communicator(opt.comm);
    if (!opened) return ctx.fail(opened.error());
    if (world != 0 && world != (*opened)->world())
      return ctx.fail("--world " + std::to_string(world) + " but the " + (*opened)->name() + " job has " +
                      std::to_string((*opened)->world()) + " ranks");
    world = (*opened)->world();
    comms.push_back(std::move(*opened));
  }

  // From here on a failure of this process is announced to the other
  // ranks, so theirs end at once instead of at their timeout.
  const auto fail_all = [&](const Error& error) {
    for (auto& c : comms) c->fail(Status(error));
    return ctx.fail(error);
  };
  if (!ctx.load_model(opt.model)) {
    for (auto& c : comms) c->fail(make_error(ErrorCode::unavailable, "its model did not open"));
    return ctx.exit_code();
  }
  const Model& model = ctx.model();
  ShardSpec spec;
  spec.world = world;
  if (!opt.shard_rules.empty()) {
    auto rules = read_shard_rules_file(opt.shard_rules);
    if (!rules) return fail_all(rules.error());
    spec.rules = std::move(*rules);
  }
  auto plans = plan_shards_all(model, spec);
  if (!plans) return fail_all(plans.error());
  auto load = plan_cooperative_load(model, *plans);
  if (!load) return fail_all(load.error());
  if (!ctx.open_backend(opt.backend)) {
    for (auto& c : comms) c->fail(make_error(ErrorCode::unavailable, "its backend \"" + opt.backend + "\" did not open"));
    return ctx.exit_code();
  }

  CooperativeLoadOptions options;
  options.read = opt.read;
  options.timeout = std::chrono::seconds(opt.timeout_s);
  std::vector<std::optional<Result<RankShards>>> results(comms.size());
  {
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < comms.size(); ++i)
      threads.emplace_back([&, i] { results[i] = cooperative_load(model, *plans, *load, *comms[i], options); });
    for (std::thread& t : threads) t.join();
  }
  int exit_code = kExitOk;
  for (std::size_t i = 0; i < comms.size(); ++i) {
    const std::uint32_t rank = comms[i]->rank();
    Result<RankShards>& got = *results[i];
    if (!got) {
      ctx.report(got.error());
      exit_code = kExitBadInput;
      continue;
    }
    auto placed = place(ctx.gpu(), model, plans->ranks[rank], *got, opt.dump);
    if (!placed) {
      ctx.report(placed.error());
      exit_code = kExitBadInput;
      continue;
    }
    const CooperativeLoadReport& r = got->report;
    if (opt.json) {
      // One line per rank: ranks of an MPI job print theirs side by side.
      std::cout << rank_json(r, *placed, got->shards.size(), comms[i]->name(), world).dump() << std::endl;
    } else {
      std::printf("rank %u of %u (%s): read %s from storage (kept %s), sent %s, received %s, inline %s; "
                  "%zu shards, %s on %s; %.3f s\n",
                  rank, world, comms[i]->name().c_str(), human_bytes(r.read_bytes).c_str(), human_bytes(r.kept_bytes).c_str(),
                  human_bytes(r.sent_bytes).c_str(), human_bytes(r.received_bytes).c_str(),
                  human_bytes(r.inline_bytes).c_str(), got->shards.size(), human_bytes(*placed).c_str(),
                  ctx.gpu().info().backend.c_str(), r.seconds);
      std::fflush(stdout);
    }
  }
  if (exit_code == kExitOk && comms.size() == world && !opt.json)
    std::printf("the ranks read %s together (the referenced bytes, once); each reading its own shards: %s; "
                "each reading everything: %s\n",
                human_bytes(load->union_bytes).c_str(), human_bytes(load->read_per_rank_bytes).c_str(),
                human_bytes(load->read_everything_bytes).c_str());
  return exit_code;
}

}  // namespace ballast::cli
