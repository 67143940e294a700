// gather_launch + the slice derivation: a strided (inner-axis) shard
// gathered on the device from its whole weight in place equals the shard
// gathered on the host from the mapping, byte for byte, on every format
// (safetensors row-parallel [out, in] weights, ONNX MatMul columns and
// MatMulNBits k-blocks with their scales, GGUF whole blocks), at 2 and 4
// ranks, on the CPU backend (the weight registered zero-copy: its mapping
// read in place) and on Vulkan (uploaded whole) where a device opens.
#include "unit/shard/models.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>

using namespace ballast;
using namespace ballast::testing;

namespace {

// Every strided shard of every rank gathered on `gpu`; returns how many.
std::size_t check_model(GpuBackend& gpu, const Model& m, std::uint32_t world) {
  CAPTURE(world);
  auto plans = plan_shards_all(m, ShardSpec{world, 0, {}});
  REQUIRE_MESSAGE(plans.ok(), plans.error().to_string());
  const bool in_place = gpu.capabilities().host_registration;
  std::size_t gathered = 0;
  for (const ShardPlan& rank : plans->ranks) {
    for (const WeightShard& s : rank.weights) {
      if (s.contiguous()) continue;
      CAPTURE(s.weight);
      const WeightRef& w = m.store().weights().at(s.id);
      const Bytes bytes = *m.store().bytes(w);
      // The whole weight on the device: its mapped bytes registered in
      // place, or uploaded.
      DevicePtr weight = 0;
      if (in_place) {
        auto r = gpu.register_host(bytes.data(), bytes.size(), HostAccess::read_only);
        REQUIRE_MESSAGE(r.ok(), r.error().to_string());
        weight = *r;
      } else {
        auto a = gpu.allocate(bytes.size());
        REQUIRE(a.ok());
        REQUIRE(gpu.copy_to_device(*a, 0, bytes).ok());
        weight = *a;
      }
      auto dst = gpu.allocate(s.device_bytes);
      REQUIRE(dst.ok());
      std::uint64_t at = 0;
      for (std::size_t part = 0; part < s.strided.size(); ++part) {
        auto l = gather_launch(m, s, part, weight);
        REQUIRE_MESSAGE(l.ok(), l.error().to_string());
        CHECK(l->kind == Derivation::slice);
        // It moves the widest whole element (8, 4, 2 or 1 bytes) that
        // divides the run, the row stride, the run's first byte in its row
        // and the source row's address.
        const StridedView& v = s.strided[part];
        const std::uint64_t first = l->col_offset * (dtype_bits(l->src_type) / 8);
        const std::uint64_t all = v.row_bytes | v.row_stride | first | l->src;
        const unsigned widest = all % 8 == 0 ? 8 : all % 4 == 0 ? 4 : all % 2 == 0 ? 2 : 1;
        CHECK(dtype_bits(l->src_type) == 8 * widest);
        l->dst = *dst + at;
        const Status launched = gpu.launch(*l);
        REQUIRE_MESSAGE(launched.ok(), launched.to_string());
        at += s.strided[part].bytes();
      }
      CHECK(at == s.device_bytes);
      REQUIRE(gpu.synchronize().ok());
      std::vector<std::byte> back(s.device_bytes);
      REQUIRE(gpu.copy_to_host(back, *dst, 0).ok());
      CHECK(back == gather(m, s));
      CHECK(gpu.free(*dst).ok());
      CHECK((in_place ? gpu.unregister_host(weight) : gpu.free(weight)).ok());
      ++gathered;
    }
  }
  return gathered;
}

void check_every_format(GpuBackend& gpu) {
  ScratchDir dir("dist-gather");
  auto st = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE_MESSAGE(st.ok(), st.error().to_string());
  auto onnx = llm_onnx().write(dir);
  REQUIRE_MESSAGE(onnx.ok(), onnx.error().to_string());
  auto gguf = open_model(dir.write("m.gguf", gguf_of(gguf_llama())));
  REQUIRE_MESSAGE(gguf.ok(), gguf.error().to_string());
  for (std::uint32_t world : {2u, 4u}) {
    CHECK(check_model(gpu, *st, world) > 0);
    CHECK(check_model(gpu, *onnx, world) > 0);
  }
  CHECK(check_model(gpu, *gguf, 2) > 0);
}

}  // namespace

TEST_CASE("gather_launch: strided shards gathered on the CPU backend from the mapping in place") {
  auto gpu = open_backend("cpu");
  REQUIRE(gpu.ok());
  REQUIRE((*gpu)->capabilities().host_registration);
  check_every_format(**gpu);
}

TEST_CASE("gather_launch: strided shards gathered on Vulkan") {
  auto gpu = open_backend("vulkan");
  if (!gpu.ok()) {
    MESSAGE("skipped: no Vulkan device opens: " << gpu.error().to_string());
    return;
  }
  check_every_format(**gpu);
}

TEST_CASE("gather_launch: a part the shard lacks, and a contiguous shard, are refused naming the weight") {
  ScratchDir dir("dist-gather-refused");
  auto m = open_model(dir.write("m.safetensors", st_file(hf_tensors())));
  REQUIRE(m.ok());
  auto plans = plan_shards_all(*m, ShardSpec{2, 0, {}});
  REQUIRE(plans.ok());
  bool strided = false, contiguous = false;
  for (const WeightShard& s : plans->ranks[0].weights) {
    auto l = gather_launch(*m, s, s.strided.size(), 0x1000);
    REQUIRE_FALSE(l.ok());
    CHECK(l.code() == ErrorCode::invalid_argument);
    CHECK(l.error().to_string().find(s.weight) != std::string::npos);
    (s.contiguous() ? contiguous : strided) = true;
  }
  CHECK(strided);
  CHECK(contiguous);
}
