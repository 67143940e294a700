// A minimal engine on ballast: open a model, open a backend chosen by a
// config string, make the source weights visible to it, derive what MatMul
// and Gemm kernels want (each weight transposed, and float32 ones as f16),
// print what happened, tear down, and prove nothing was left on the device.
//
//   engine MODEL.onnx BACKEND      e.g. engine sample.onnx vulkan:0
// Exit: 0 ok, 1 a step failed or the device counters did not return to
// their baseline, 2 usage.
#include <ballast/backend_registry.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/device_weights.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/onnx_loader.hpp>

#include <cstdio>
#include <string>

using namespace ballast;

namespace {

// One derivation through the memo: allocate, launch, wait, memoize. The
// synchronize() comes before the value is memoized, so a kernel that fails
// asynchronously is reported here instead of leaving a bad value behind.
Result<DevicePtr> derive_one(GpuBackend& gpu, DerivedWeights& memo, DerivationLaunch launch) {
  auto sizes = derivation_sizes(launch);
  if (!sizes.ok()) return sizes.error();
  return memo.get_or_build_ptr(launch.kind, launch.src, [&]() -> Result<DerivedPtr> {
    auto dst = gpu.allocate(sizes->dst_bytes);
    if (!dst.ok()) return dst.error();
    launch.dst = *dst;
    Status s = gpu.launch(launch);
    if (s.ok()) s = gpu.synchronize();
    if (!s.ok()) {
      static_cast<void>(gpu.free(*dst));
      return s.error();
    }
    return DerivedPtr{*dst, sizes->dst_bytes};
  });
}

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

    for (const NodeInfo& node : model->nodes()) {
      const bool dense = (node.op_type == "MatMul" || node.op_type == "Gemm") && node.domain.empty();
      if (!dense || node.inputs.size() < 2) continue;
      const auto id = model->value_id(node.inputs[1]);
      const auto w = id ? model->store().weights.find(*id) : model->store().weights.end();
      if (w == model->store().weights.end() || w->second.dims.size() != 2) continue;  // not a weight
      const WeightRef& ref = w->second;
      if (ref.dtype != DataType::float32 && ref.dtype != DataType::float16) continue;

      auto src = source.resolve(*id);
      if (!src.ok()) return fail(src.error());
      DerivationLaunch launch;
      launch.src_type = ref.dtype;
      launch.rows = static_cast<std::uint64_t>(ref.dims[0]);
      launch.cols = static_cast<std::uint64_t>(ref.dims[1]);
      launch.src = *src;
      std::string done;
      for (Derivation kind : {Derivation::transpose, Derivation::to_f16}) {
        if (kind == Derivation::to_f16 && ref.dtype != DataType::float32) continue;
        launch.kind = kind;
        auto out = derive_one(gpu, derived, launch);
        if (!out.ok()) return fail(std::move(out.error()).with_context(std::string(node.inputs[1])));
        done += (done.empty() ? "" : ", ") + std::string(derivation_name(kind));
        ++derivations;
      }
      std::printf("  %-24.*s [%llu x %llu] %s\n", static_cast<int>(node.inputs[1].size()), node.inputs[1].data(),
                  static_cast<unsigned long long>(launch.rows), static_cast<unsigned long long>(launch.cols),
                  done.c_str());
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
