// A minimal engine on ballast: open a model (ONNX, safetensors or GGUF:
// open_model tells them apart), open a backend chosen by a
// config string, make the source weights visible to it, derive everything
// its MatMul, Gemm and MatMulNBits nodes want in one batch (launched
// together, synchronized once, then memoized), print what happened, tear
// down, and prove nothing was left on the device. Then a decode loop's
// view through a Residency: the one encoding per weight its kernels read
// (a DerivationPolicy: int4 weights repacked, float ones as int8), pinned a
// layer at a time (groups by name: "layer0.", "layer1.", ...) while the
// next layer is prefetched, paged under half of what those encodings need
// or the least above that every layer fits in (evicting as it goes):
// every value must read back as the batch made it.
//
//   engine MODEL BACKEND [LAYER_STEM]        e.g. engine sample.onnx vulkan:0
//                                            LAYER_STEM: "layer" (default), "model.layers.", "blk." ...
//   engine --ranks MODEL COMM BACKEND        tensor-parallel ranks (ranks.cpp): COMM mpi
//                                            (under mpirun -np N) or local:N
// Exit: 0 ok, 1 a step failed or the device counters did not return to
// their baseline, 2 usage.
#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/model.hpp>
#include <ballast/residency.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace ballast;

namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "%s\n", e.to_string().c_str());
  return 1;
}

// The first bytes of a device value: enough to tell two builds apart.
std::vector<std::byte> head(GpuBackend& gpu, DevicePtr ptr, std::uint64_t bytes) {
  std::vector<std::byte> out(std::min<std::uint64_t>(bytes, 64));
  if (!out.empty() && !gpu.copy_to_host(out, ptr, 0).ok()) out.clear();
  return out;
}

std::uint64_t first_bytes(const PlannedDerivation& p) {
  DerivationLaunch l = p.launch;
  auto sizes = derivation_sizes(l);
  return sizes.ok() ? sizes->dst_bytes : 0;
}

// What a planned value is, for matching the paged pass against the batch.
std::string key(const PlannedDerivation& p) {
  return std::string(derivation_name(p.kind())) + " of " + p.weight + " for " + p.node;
}

bool same(const AllocationCounters& a, const AllocationCounters& b) {
  return a.live_allocations == b.live_allocations && a.live_bytes == b.live_bytes &&
         a.live_registrations == b.live_registrations;
}

}  // namespace

int run_ranks(const char* model_path, const std::string& comm_config, const char* backend);  // ranks.cpp

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--ranks") return run_ranks(argv[2], argv[3], argv[4]);
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr,
                 "usage: %s MODEL BACKEND [LAYER_STEM] (e.g. cpu, vulkan:0, cuda:0)\n"
                 "       %s --ranks MODEL COMM BACKEND (COMM: mpi or nccl under mpirun, or local:N)\n",
                 argv[0], argv[0]);
    return 2;
  }
  const std::string layer_stem = argc == 4 ? argv[3] : "layer";
  auto model = open_model(argv[1]);  // .onnx, .safetensors (or its index), .gguf
  if (!model.ok()) return fail(model.error());
  auto opened = open_backend(argv[2]);
  if (!opened.ok()) return fail(opened.error());
  GpuBackend& gpu = **opened;
  std::printf("backend %s: %s (%s)\n", argv[2], gpu.info().name.c_str(), gpu.info().uuid.c_str());
  const AllocationCounters baseline = gpu.counters();

  int derivations = 0;
  std::map<std::string, std::vector<std::byte>> batch_heads;
  {
    DeviceWeights source(gpu, model->store());
    DerivedWeights derived;
    TeardownHost<GpuBackend> host(gpu);  // declared last, so destroyed first
    host.add(source);
    host.add(derived);

    // Which derivation applies to which weight, and why. A weight a rule
    // matched but cannot plan (a GGUF block type no kind decodes, a GPTQ
    // qweight) is an error unless the skips are collected: list them. The
    // graph's skips (quant_int8 of a bfloat16 B, a model-local function
    // whose nodes are not read) are listed there too, never errors.
    std::vector<PlanSkip> skipped;
    PlanOptions plan_options;
    plan_options.skipped = &skipped;
    auto plan = plan_derivations(*model, plan_options);
    if (!plan.ok()) return fail(plan.error());
    for (const PlanSkip& s : skipped)  // rule empty: the graph's, read off node s.node
      std::printf("skipped by %s %s: %s: %s\n", s.rule.empty() ? "node" : "rule",
                  (s.rule.empty() ? s.node : s.rule).c_str(), s.weight.c_str(), s.reason.c_str());
    const DeriveContext ctx{gpu, *model, source, derived};
    auto values = derive_weights(ctx, *plan, [](const DeriveProgress& p) {
      if (p.done == p.total) std::printf("derived %zu of %zu (%llu source bytes)\n", p.done, p.total,
                                         static_cast<unsigned long long>(p.source_bytes_done));
    });
    if (!values.ok()) return fail(values.error());
    for (std::size_t i = 0; i < plan->size(); ++i) {
      const PlannedDerivation& p = (*plan)[i];
      std::printf("  %-28s %-12s for %-20s -> 0x%llx\n", p.weight.c_str(),
                  std::string(derivation_name(p.kind())).c_str(), p.node.c_str(),
                  static_cast<unsigned long long>((*values)[i].first));
      batch_heads[key(p)] = head(gpu, (*values)[i].first, first_bytes(p));
      ++derivations;
    }
    const WeightResidency r = source.residency();
    std::printf("%d derivations, %zu memo entries, %llu bytes derived\n", derivations, derived.len(),
                static_cast<unsigned long long>(derived.bytes()));
    std::printf("source weights: %llu files registered zero-copy, %llu weights uploaded%s%s\n",
                static_cast<unsigned long long>(r.registered_files), static_cast<unsigned long long>(r.uploaded_weights),
                r.fallback_reason.empty() ? "" : "; fallback: ", r.fallback_reason.c_str());

    const TeardownReport report = host.teardown(gpu);
    std::printf("%s", report.to_string().c_str());
    if (!report.ok()) return 1;
  }
  const AllocationCounters after = gpu.counters();
  if (!same(after, baseline)) {
    std::fprintf(stderr, "leak: %llu allocations (%llu bytes) and %llu registrations still live after teardown\n",
                 static_cast<unsigned long long>(after.live_allocations - baseline.live_allocations),
                 static_cast<unsigned long long>(after.live_bytes - baseline.live_bytes),
                 static_cast<unsigned long long>(after.live_registrations - baseline.live_registrations));
    return 1;
  }
  std::printf("counters back to baseline: ok\n");

  // A decode loop's view. The engine says which encodings its kernels read
  // (auto then counts only those) and how its weights form layers; create()
  // plans, filters and groups, and refuses a budget some layer cannot fit in.
  {
    ResidencyOptions options;
    options.strategy = ResidencyStrategy::paged;
    options.policy = DerivationPolicy::only({Derivation::repack_int4, Derivation::quant_int8});
    options.group_by = group_by_layer(layer_stem);
    auto sized = Residency::create(gpu, *model, options);  // budget: auto
    if (!sized.ok()) return fail(sized.error());
    const std::uint64_t full = (*sized)->budget();
    sized->reset();
    std::unique_ptr<Residency> paged;
    for (std::uint64_t b = full / 2; !paged && b <= full; b += full / 10) {
      options.budget_bytes = b;
      if (auto r = Residency::create(gpu, *model, options); r.ok()) paged = std::move(*r);
    }
    if (!paged) return fail(make_error(ErrorCode::invalid_argument, "no budget up to auto was accepted"));
    const std::span<const ResidencyGroup> layers = paged->groups();  // in graph order
    for (int token = 0; token < 2; ++token) {
      for (std::size_t g = 0; g < layers.size(); ++g) {
        if (g + 1 < layers.size()) paged->prefetch(layers[g + 1]);  // the next layer, in the background
        // Every member or none; short of room, wait a while for other pins to go.
        auto layer = paged->pin(layers[g], std::chrono::seconds(5));
        if (!layer.ok()) return fail(layer.error());
        for (std::size_t i = 0; i < layers[g].derivations.size(); ++i) {
          const Pinned& value = layer->derived[i];  // held while "the kernel" reads it
          if (head(gpu, value.first(), value.first_bytes()) != batch_heads[key(layers[g].derivations[i])]) {
            std::fprintf(stderr, "paged %s differs from the batch's\n", key(layers[g].derivations[i]).c_str());
            return 1;
          }
        }
      }
    }
    paged->wait_for_prefetches();
    const ResidencyStats st = paged->stats();
    std::printf("%s\n", st.to_string().c_str());
    std::printf("paged %zu encodings in %zu layers under %llu of %llu auto bytes: peak %llu, %llu evictions, "
                "%llu rebuilds, same values: ok\n",
                paged->plan().size(), layers.size(), static_cast<unsigned long long>(st.budget_bytes),
                static_cast<unsigned long long>(full), static_cast<unsigned long long>(st.peak_device_bytes),
                static_cast<unsigned long long>(st.source_evictions + st.derived_evictions),
                static_cast<unsigned long long>(st.derived_rebuilds));
    const Released released = paged->release(gpu);
    if (!released.status.ok() || st.peak_device_bytes > st.budget_bytes) return 1;
  }
  if (!same(gpu.counters(), baseline)) {
    std::fprintf(stderr, "leak after the paged pass\n");
    return 1;
  }
  return 0;
}
