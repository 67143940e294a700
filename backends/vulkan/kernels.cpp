#include "kernels.hpp"

#include "embedded_shaders.hpp"

#include <algorithm>
#include <cstring>

namespace ballast::vulkan {
namespace {

const shaders::Spirv& spirv_of(Derivation kind) { return *shaders::by_kind[static_cast<int>(kind)]; }

void set_address(std::uint32_t (&out)[2], DevicePtr ptr) {
  const DevicePtr aligned = ptr & ~DevicePtr{3};
  out[0] = static_cast<std::uint32_t>(aligned);
  out[1] = static_cast<std::uint32_t>(aligned >> 32);
}

std::uint32_t shift_of(DevicePtr ptr, unsigned operand) { return static_cast<std::uint32_t>(ptr & 3) << (2 * operand); }

// Operand order of the shifts field (OP_* in common.glsl).
enum Operand : unsigned { kSrc = 0, kScales = 1, kZeroPoints = 2, kDst = 3, kDst2 = 4 };

std::uint32_t word_count(DevicePtr ptr, std::uint64_t bytes) {
  return static_cast<std::uint32_t>(((ptr & 3) + bytes + 3) >> 2);
}

// The shader's VARIANT specialization constant. A kind not listed here
// (every GGUF kind, and any kind added since) reads the launch's src_type
// as its DataType number: gguf_common.glsl names the block types so.
std::uint32_t variant_of(const DerivationLaunch& l) {
  switch (l.kind) {
    case Derivation::transpose:
    case Derivation::slice: return dtype_bits(l.src_type) / 8;
    case Derivation::to_f16: return l.src_type == DataType::bfloat16 ? 1 : 0;
    case Derivation::dequant_int4:
    case Derivation::repack_int4:
    case Derivation::quant_int8:
    case Derivation::quant_int8_given_max: return l.src_type == DataType::float16 ? 1 : 0;
    default: return static_cast<std::uint32_t>(l.src_type);
  }
}

bool aligned(DevicePtr ptr, DevicePtr to) { return ptr % to == 0; }

// Scales, and unpacked zero points, at their type's natural alignment.
bool int4_side_operands_aligned(const DerivationLaunch& l) {
  const DevicePtr e = l.src_type == DataType::float16 ? 2 : 4;
  return aligned(l.scales, e) && (l.zero_points != ZeroPoints::unpacked || aligned(l.zero_point, e));
}

}  // namespace

PacketDivider packet_divider(std::uint32_t d) {
  std::uint32_t log2 = 0;
  while ((std::uint64_t{2} << log2) <= d) ++log2;  // floor(log2 d)
  if ((d & (d - 1)) == 0) return {0, log2};
  // mul = ceil(2^(32+s) / d) with s = floor(log2 d) < log2(d): it fits in 32
  // bits, and its excess e = mul * d - 2^(32+s) < d <= 2^(s+1) keeps
  // i * e < 2^(32+s), so the quotient is exact, for every i < 2^31.
  const std::uint64_t numerator = std::uint64_t{1} << (32 + log2);  // log2 <= 31
  const auto mul = static_cast<std::uint32_t>((numerator + d - 1) / d);
  return {mul, log2};
}

Result<std::unique_ptr<Kernels>> Kernels::create(const Device& device, std::uint32_t max_groups) {
  std::unique_ptr<Kernels> k(new Kernels(device, max_groups));
  VkPushConstantRange range{};
  range.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  range.size = sizeof(PushConstants);
  VkPipelineLayoutCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  info.pushConstantRangeCount = 1;
  info.pPushConstantRanges = &range;
  if (auto s = vk_check(device.fns().CreatePipelineLayout(device.handle(), &info, nullptr, &k->layout_), "vkCreatePipelineLayout"); !s)
    return s.error();
  return k;
}

Kernels::~Kernels() {
  const DeviceFns& f = device_.fns();
  for (auto& [key, pipeline] : pipelines_) f.DestroyPipeline(device_.handle(), pipeline, nullptr);
  for (auto& [key, module] : modules_) f.DestroyShaderModule(device_.handle(), module, nullptr);
  if (layout_ != VK_NULL_HANDLE) f.DestroyPipelineLayout(device_.handle(), layout_, nullptr);
}

Result<VkPipeline> Kernels::pipeline(Derivation kind, std::uint32_t variant, std::uint32_t zero_points, bool packets) {
  const auto key = std::make_tuple(kind, variant, zero_points, packets);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
  const DeviceFns& f = device_.fns();

  auto module_it = modules_.find(kind);
  if (module_it == modules_.end()) {
    const shaders::Spirv& spirv = spirv_of(kind);
    std::vector<std::uint32_t> words(spirv.size / 4);
    std::memcpy(words.data(), spirv.bytes, words.size() * 4);
    VkShaderModuleCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    info.codeSize = words.size() * 4;
    info.pCode = words.data();
    VkShaderModule module = VK_NULL_HANDLE;
    if (auto s = vk_check(f.CreateShaderModule(device_.handle(), &info, nullptr, &module), "vkCreateShaderModule"); !s)
      return std::move(s).with_context("loading the " + std::string(derivation_name(kind)) + " shader");
    module_it = modules_.emplace(kind, module).first;
  }

  const std::uint32_t constants[4] = {kWorkgroupSize, variant, zero_points, packets ? 1u : 0u};
  VkSpecializationMapEntry entries[4];
  for (std::uint32_t i = 0; i < 4; ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo specialization{4, entries, sizeof constants, constants};
  VkComputePipelineCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module_it->second;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = &specialization;
  info.layout = layout_;
  VkPipeline pipeline = VK_NULL_HANDLE;
  if (auto s = vk_check(f.CreateComputePipelines(device_.handle(), VK_NULL_HANDLE, 1, &info, nullptr, &pipeline),
                        "vkCreateComputePipelines");
      !s)
    return std::move(s).with_context("building the " + std::string(derivation_name(kind)) + " pipeline");
  pipelines_.emplace(key, pipeline);
  return pipeline;
}

void Kernels::split(std::vector<Dispatch>& out, VkPipeline pipeline, const PushConstants& params, std::uint32_t first,
                    std::uint32_t total, std::uint32_t items_per_group) const {
  if (first >= total) return;
  const std::uint64_t groups = (std::uint64_t{total} - first + items_per_group - 1) / items_per_group;
  for (std::uint64_t group = 0; group < groups; group += max_groups_) {
    Dispatch d;
    d.pipeline = pipeline;
    d.params = params;
    d.params.total = total;
    d.params.base = static_cast<std::uint32_t>(first + group * items_per_group);
    d.groups = static_cast<std::uint32_t>(std::min<std::uint64_t>(max_groups_, groups - group));
    out.push_back(d);
  }
}

// Packet pipelines (FAST in shaders/common.glsl) take a launch when its
// operands allow 16-byte accesses and its shape splits into whole packets:
//  to_f16        src and dst 16-byte aligned; the elements past the last
//                whole packet (fewer than eight) go to the word pipeline;
//  dequant_int4  K a multiple of 8, src 4- and dst 16-byte aligned;
//  repack_int4   K a multiple of 32, src and dst 16-, dst2 4-byte aligned;
//                for both, scales and unpacked zero points at their
//                type's alignment (read as whole words or halves);
//  quant_int8    K a multiple of 16, src and dst 16-, dst2 4-byte aligned
//                (quant_int8_given_max: the word pipeline, one workgroup
//                per row, as quant_int8's);
//  transpose     src and dst 16-byte aligned, rows of both matrices whole
//                packets (the tiled mode, moved as packets).
// Any other kind (the GGUF kinds, whose blocks sit at 2-byte boundaries,
// and any kind added since) has the word pipeline only, dispatched the
// one way that fits every kind: one invocation per 32-bit word of each
// output, the first output with mode 0 and a pair's second with mode 1
// (written through the shader's dst slot). So a new kind needs its shader
// and nothing here, unless it wants packets or tiles.
Result<std::vector<Dispatch>> Kernels::plan(const DerivationLaunch& l, const DerivationSizes& sizes) {
  std::vector<Dispatch> out;
  const std::uint32_t zp = (l.kind == Derivation::dequant_int4 || l.kind == Derivation::repack_int4)
                               ? static_cast<std::uint32_t>(l.zero_points)
                               : 0;
  const std::uint64_t e = dtype_bits(l.src_type) / 8;  // transpose: element bytes
  bool packets = false;
  switch (l.kind) {
    case Derivation::transpose:
      packets = aligned(l.src, 16) && aligned(l.dst, 16) && (l.rows * e) % 16 == 0 && (l.cols * e) % 16 == 0;
      break;
    case Derivation::to_f16: packets = aligned(l.src, 16) && aligned(l.dst, 16); break;
    case Derivation::dequant_int4:
      packets = l.cols % 8 == 0 && aligned(l.src, 4) && aligned(l.dst, 16) && int4_side_operands_aligned(l);
      break;
    case Derivation::repack_int4:
      packets = l.cols % 32 == 0 && aligned(l.src, 16) && aligned(l.dst, 16) && aligned(l.dst2, 4) &&
                int4_side_operands_aligned(l);
      break;
    case Derivation::quant_int8:
      packets = l.cols % 16 == 0 && aligned(l.src, 16) && aligned(l.dst, 16) && aligned(l.dst2, 4);
      break;
    default: break;  // word pipeline only
  }
  // Only the pipelines this launch dispatches are built: the word pipeline
  // without packets, or for to_f16's tail.
  VkPipeline word_pipe = VK_NULL_HANDLE, packet_pipe = VK_NULL_HANDLE;
  if (!packets || (l.kind == Derivation::to_f16 && (l.rows * l.cols) % 8 != 0)) {
    auto built = pipeline(l.kind, variant_of(l), zp, false);
    if (!built) return built.error();
    word_pipe = *built;
  }
  if (packets) {
    auto built = pipeline(l.kind, variant_of(l), zp, true);
    if (!built) return built.error();
    packet_pipe = *built;
  }

  PushConstants p{};
  set_address(p.src, l.src);
  set_address(p.scales, l.scales);
  set_address(p.zero_points, l.zero_point);
  set_address(p.dst, l.dst);
  set_address(p.dst2, l.dst2);
  p.shifts = shift_of(l.src, kSrc) | shift_of(l.scales, kScales) | shift_of(l.zero_point, kZeroPoints) |
             shift_of(l.dst, kDst) | shift_of(l.dst2, kDst2);
  // Every operand is < 4 GiB (the backend checks), so 32-bit sizes and
  // offsets suffice in the shaders.
  p.rows = static_cast<std::uint32_t>(l.rows);
  p.cols = static_cast<std::uint32_t>(l.cols);
  p.block_size = l.block_size;
  p.src_cols = static_cast<std::uint32_t>(l.src_cols);
  p.col_offset = static_cast<std::uint32_t>(l.col_offset);
  p.dst_bytes = static_cast<std::uint32_t>(sizes.dst_bytes);
  p.dst2_bytes = static_cast<std::uint32_t>(sizes.dst2_bytes);
  const std::uint32_t words = word_count(l.dst, sizes.dst_bytes);
  const std::uint32_t per_group = kWorkgroupSize * kWordsPerInvocation;
  // One packet per invocation; `columns` of a row per packet.
  auto split_packets = [&](std::uint32_t count, std::uint64_t columns) {
    PushConstants fast = p;
    const PacketDivider div = packet_divider(static_cast<std::uint32_t>(std::max<std::uint64_t>(1, l.cols / columns)));
    fast.div_mul = div.mul;
    fast.div_shift = div.shift;
    split(out, packet_pipe, fast, 0, count, kWorkgroupSize);
  };
  // The word pipeline's one geometry (above): each output in its own pass.
  auto split_words = [&] {
    split(out, word_pipe, p, 0, words, per_group);
    if (!derivation_kind(l.kind).pair) return;
    PushConstants second = p;
    second.mode = 1;
    set_address(second.dst, l.dst2);
    second.shifts = (p.shifts & ~(3u << (2 * kDst))) | static_cast<std::uint32_t>((l.dst2 & 3) << (2 * kDst));
    second.dst_bytes = static_cast<std::uint32_t>(sizes.dst2_bytes);
    split(out, word_pipe, second, 0, word_count(l.dst2, sizes.dst2_bytes), per_group);
  };

  switch (l.kind) {
    case Derivation::transpose: {
      // Tiled (shaders/transpose.comp, mode 1) when both operands are
      // word-aligned and every row of both matrices is whole words: then no
      // output word is shared by two tiles and every store is a plain one.
      const std::uint64_t tiles = ((l.rows + 31) / 32) * ((l.cols + 31) / 32);
      if ((l.src & 3) == 0 && (l.dst & 3) == 0 && (l.rows * e) % 4 == 0 && (l.cols * e) % 4 == 0 &&
          tiles <= 0xffffffffu) {
        if (tiles != 0) {
          p.mode = 1;
          split(out, packets ? packet_pipe : word_pipe, p, 0, static_cast<std::uint32_t>(tiles), 1);
        }
        break;
      }
      split(out, word_pipe, p, 0, words, per_group);
      break;
    }
    case Derivation::to_f16: {
      const auto count = packets ? static_cast<std::uint32_t>(l.rows * l.cols / 8) : 0u;
      if (count != 0) split_packets(count, 1);
      split(out, word_pipe, p, 4 * count, words, per_group);  // the tail: fewer than eight elements
      break;
    }
    case Derivation::dequant_int4:
      if (packets) {
        if (words != 0) split_packets(words / 4, 8);
      } else {
        split(out, word_pipe, p, 0, words, per_group);
      }
      break;
    case Derivation::repack_int4:
      if (packets) {
        if (words != 0) split_packets(words / 4, 32);
        break;
      }
      split_words();
      break;
    case Derivation::quant_int8:
    case Derivation::quant_int8_given_max:  // one workgroup per row; words only (its shader says why)
      if (l.rows != 0) split(out, packets ? packet_pipe : word_pipe, p, 0, static_cast<std::uint32_t>(l.rows), 1);
      break;
    default: split_words(); break;
  }
  return out;
}

void Kernels::record(VkCommandBuffer cb, const std::vector<Dispatch>& dispatches) const {
  const DeviceFns& f = device_.fns();
  VkPipeline bound = VK_NULL_HANDLE;
  for (const Dispatch& d : dispatches) {
    if (d.pipeline != bound) {
      f.CmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline);
      bound = d.pipeline;
    }
    f.CmdPushConstants(cb, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(PushConstants), &d.params);
    f.CmdDispatch(cb, d.groups, 1, 1);
  }
}

}  // namespace ballast::vulkan
