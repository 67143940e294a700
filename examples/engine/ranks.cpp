// The engine's --ranks mode: a tensor-parallel engine's load. Every rank
// opens the model, takes its shard plan, reads its part of the checkpoint
// cooperatively (the ranks read it once between them), shares the rows'
// maxima its row-parallel int8 quantization needs with the other ranks,
// puts its shards on its device and derives them (the whole model's plan
// cut to its shards), then gives the device back; the process checks its
// counters at the end. A derivation a rank had to skip fails the run: an
// engine would miss that value.
//
//   engine --ranks MODEL COMM BACKEND    COMM: mpi (under mpirun -np N), nccl[?...] (the same; rounds
//                                        on a CUDA device), or local:N (N ranks as threads)
//   e.g. mpirun -np 2 engine --ranks model.onnx mpi cpu
#include <ballast/backend_registry.hpp>
#include <ballast/communicator.hpp>
#include <ballast/cooperative_load.hpp>
#include <ballast/derive.hpp>
#include <ballast/model.hpp>
#include <ballast/shard.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace ballast;

namespace {

// One rank, start to end; 0 ok, 1 failed (said on stderr).
int run_rank(const Model& model, const ShardPlans& plans, const CooperativeLoadPlan& load,
             const std::vector<PlannedDerivation>& plan, Communicator& comm, GpuBackend& gpu) {
  const std::uint32_t r = comm.rank();
  auto mine = cooperative_load(model, plans, load, comm);
  if (!mine.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", r, mine.error().to_string().c_str());
    return 1;
  }
  // quant_int8 scales each row by its largest magnitude; a rank holding part
  // of each row (a row-parallel weight) needs the others' parts' maxima.
  // Every rank calls this, before placing.
  if (Status s = share_row_maxima(model, plans.ranks[r], *mine, plan, comm); !s.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", r, s.to_string().c_str());
    return 1;
  }
  {
    auto device = place_rank(gpu, model, plans.ranks[r], *mine, plan);
    if (!device.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", r, device.error().to_string().c_str());
      return 1;
    }
    const CooperativeLoadReport& rep = mine->report;
    std::printf("rank %u of %u: read %llu bytes, sent %llu, received %llu; %zu shards (%llu bytes) and %zu derived "
                "values (%llu bytes) on %s; %zu skipped\n",
                r, comm.world(), static_cast<unsigned long long>(rep.read_bytes),
                static_cast<unsigned long long>(rep.sent_bytes), static_cast<unsigned long long>(rep.received_bytes),
                device->shards.size(), static_cast<unsigned long long>(device->shard_bytes), device->derived.size(),
                static_cast<unsigned long long>(device->derived_bytes), gpu.info().backend.c_str(),
                device->skipped.size());
    for (const std::string& why : device->skipped) std::fprintf(stderr, "rank %u skipped %s\n", r, why.c_str());
    if (Status released = device->release(); !released.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", r, released.to_string().c_str());
      return 1;
    }
    if (!device->skipped.empty()) return 1;
  }
  return 0;
}

}  // namespace

int run_ranks(const char* model_path, const std::string& comm_config, const char* backend) {
  std::vector<std::unique_ptr<Communicator>> ranks;
  if (comm_config.rfind("local:", 0) == 0) {
    // N: digits only, 1 to 4096 (make_local_communicators says so for 0 and above).
    const std::string n = comm_config.substr(6);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos) {
      std::fprintf(stderr, "COMM local:N needs N, 1 to 4096 ranks; got \"%s\"\n", comm_config.c_str());
      return 2;
    }
    auto made = make_local_communicators(static_cast<std::uint32_t>(std::stoul(n)));
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.error().to_string().c_str());
      return 1;
    }
    ranks = std::move(*made);
  } else {
    auto opened = open_communicator(comm_config);
    if (!opened.ok()) {
      std::fprintf(stderr, "%s\n", opened.error().to_string().c_str());
      return 1;
    }
    ranks.push_back(std::move(*opened));
  }
  // What every rank needs, the same on each: the model, its plans, the backend.
  auto model = open_model(model_path);
  auto plans = model.ok() ? plan_shards_all(*model, ShardSpec{.world = ranks.front()->world()})
                          : Result<ShardPlans>(model.error());
  auto load = plans.ok() ? plan_cooperative_load(*model, *plans) : Result<CooperativeLoadPlan>(plans.error());
  auto plan = load.ok() ? plan_derivations(*model) : Result<std::vector<PlannedDerivation>>(load.error());
  auto gpu = plan.ok() ? open_backend(backend) : Result<std::unique_ptr<GpuBackend>>(plan.error());
  if (!gpu.ok()) {
    // Tell the other ranks at once rather than leave them to their timeout.
    for (auto& c : ranks) c->fail(gpu.error());
    std::fprintf(stderr, "%s\n", gpu.error().to_string().c_str());
    return 1;
  }
  const AllocationCounters baseline = (*gpu)->counters();
  std::vector<int> results(ranks.size(), 1);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    threads.emplace_back([&, i] { results[i] = run_rank(*model, *plans, *load, *plan, *ranks[i], **gpu); });
  for (std::thread& t : threads) t.join();
  for (int rc : results)
    if (rc != 0) return 1;
  // The ranks of this process share its backend: what they gave back, together.
  const AllocationCounters after = (*gpu)->counters();
  if (after.live_allocations != baseline.live_allocations || after.live_bytes != baseline.live_bytes) {
    std::fprintf(stderr, "the device holds what the ranks did not give back\n");
    return 1;
  }
  std::printf("ranks done: %zu in this process, counters back to baseline: ok\n", ranks.size());
  return 0;
}
