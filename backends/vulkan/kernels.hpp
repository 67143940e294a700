// The derivation kernels: pipelines built lazily from the embedded SPIR-V
// (one per shader and dtype variant, through specialisation constants) and
// the dispatches of one launch, split where the work exceeds one
// dispatch's workgroup count.
#pragma once

#include "allocator.hpp"

#include <ballast/derivation.hpp>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace ballast::vulkan {

// Mirrors `Params` in shaders/common.glsl (std430 push-constant layout).
struct PushConstants {
  std::uint32_t src[2];
  std::uint32_t scales[2];
  std::uint32_t zero_points[2];
  std::uint32_t dst[2];
  std::uint32_t dst2[2];
  std::uint32_t shifts;
  std::uint32_t rows;
  std::uint32_t cols;
  std::uint32_t block_size;
  std::uint32_t dst_bytes;
  std::uint32_t dst2_bytes;
  std::uint32_t base;
  std::uint32_t total;
  std::uint32_t mode;
  std::uint32_t div_mul;
  std::uint32_t div_shift;
  std::uint32_t src_cols;    // slice
  std::uint32_t col_offset;  // slice
};
static_assert(sizeof(PushConstants) == 92);  // within the 128 bytes every Vulkan device gives

inline constexpr std::uint32_t kWorkgroupSize = 64;
// WORDS_PER_INVOCATION in shaders/common.glsl.
inline constexpr std::uint32_t kWordsPerInvocation = 16;

// Packet index / d without a division in the shader (row_of_packet in
// shaders/common.glsl): (i * mul) >> (32 + shift), or i >> shift when mul
// is 0 (d a power of two). Exact for every i < 2^31.
struct PacketDivider {
  std::uint32_t mul = 0;
  std::uint32_t shift = 0;
};
PacketDivider packet_divider(std::uint32_t d);  // d >= 1

struct Dispatch {
  VkPipeline pipeline = VK_NULL_HANDLE;
  PushConstants params{};
  std::uint32_t groups = 0;
};

class Kernels {
 public:
  // `max_groups` caps the workgroups of one dispatch (the device's
  // maxComputeWorkGroupCount[0], or less to exercise splitting).
  static Result<std::unique_ptr<Kernels>> create(const Device& device, std::uint32_t max_groups);
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  // The dispatches computing `launch`, whose pointers are already checked
  // against `sizes`. Builds pipelines on first use.
  Result<std::vector<Dispatch>> plan(const DerivationLaunch& launch, const DerivationSizes& sizes);
  // Records them (push constants + dispatch each).
  void record(VkCommandBuffer cb, const std::vector<Dispatch>& dispatches) const;

  std::uint32_t max_groups() const { return max_groups_; }

 private:
  Kernels(const Device& device, std::uint32_t max_groups) : device_(device), max_groups_(max_groups) {}
  // `packets`: the packet pipeline (FAST in shaders/common.glsl).
  Result<VkPipeline> pipeline(Derivation kind, std::uint32_t variant, std::uint32_t zero_points, bool packets);
  // Appends the dispatches for work items [first, total), `items_per_group` each.
  void split(std::vector<Dispatch>& out, VkPipeline pipeline, const PushConstants& params, std::uint32_t first,
             std::uint32_t total, std::uint32_t items_per_group) const;

  const Device& device_;
  std::uint32_t max_groups_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::map<Derivation, VkShaderModule> modules_;
  std::map<std::tuple<Derivation, std::uint32_t, std::uint32_t, bool>, VkPipeline> pipelines_;
};

}  // namespace ballast::vulkan
