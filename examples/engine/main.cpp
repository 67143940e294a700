// A minimal engine on ballast: open a model, open a backend chosen by a
// config string, make the source weights visible to it, derive everything
// its MatMul, Gemm and MatMulNBits nodes want in one batch (launched
// together, synchronized once, then memoized), print what happened, tear
// down, and prove nothing was left on the device.
//
//   engine MODEL.onnx BACKEND      e.g. engine sample.onnx vulkan:0
// Exit: 0 ok, 1 a step failed or the device counters did not return to
// their baseline, 2 usage.
#include <ballast/backend_registry.hpp>
#include <ballast/derive.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/onnx_loader.hpp>

#include <cstdio>
#include <string>

using namespace ballast;

namespace {

int fail(const Error& e) {
  std::fprintf(stderr, "%s\n", e.to_string().c_str());
  return 1;
}

bool same(const AllocationCounters& a, const AllocationCounters& b) {
  return a.live_allocations == b.live_allocations && a.live_bytes == b.live_bytes &&
         a.live_registrations == b.live_registrations;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.onnx BACKEND (e.g. cpu, vulkan:0, cuda:0)\n", argv[0]);
    return 2;
  }
  auto model = load_onnx(argv[1]);
  if (!model.ok()) return fail(model.error());
  auto opened = open_backend(argv[2]);
  if (!opened.ok()) return fail(opened.error());
  GpuBackend& gpu = **opened;
  std::printf("backend %s: %s (%s)\n", argv[2], gpu.info().name.c_str(), gpu.info().uuid.c_str());
  const AllocationCounters baseline = gpu.counters();

  int derivations = 0;
  {
    DeviceWeights source(gpu, model->store());
    DerivedWeights derived;
    TeardownHost<GpuBackend> host(gpu);  // declared last, so destroyed first
    host.add(source);
    host.add(derived);

    auto plan = plan_derivations(*model);  // which derivation applies to which weight, and why
    if (!plan.ok()) return fail(plan.error());
    const DeriveContext ctx{gpu, *model, source, derived};
    auto values = derive_weights(ctx, *plan, [](const DeriveProgress& p) {
      if (p.done == p.total) std::printf("derived %zu of %zu (%llu source bytes)\n", p.done, p.total,
                                         static_cast<unsigned long long>(p.source_bytes_done));
    });
    if (!values.ok()) return fail(values.error());
    for (std::size_t i = 0; i < plan->size(); ++i) {
      const PlannedDerivation& p = (*plan)[i];
      std::printf("  %-28s %-12s for %-20s -> 0x%llx\n", p.weight.c_str(), std::string(derivation_name(p.kind)).c_str(),
                  p.node.c_str(), static_cast<unsigned long long>((*values)[i].first));
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
  return 0;
}
