#include "transfer.hpp"

#include <algorithm>
#include <cstring>

namespace ballast::vulkan {
namespace {

// Enough slots that a burst of launches rarely waits for an old one.
constexpr std::size_t kMaxSlots = 8;

void full_barrier(const DeviceFns& f, VkCommandBuffer cb) {
  VkMemoryBarrier barrier{};
  barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  barrier.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  f.CmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &barrier, 0,
                       nullptr, 0, nullptr);
}

}  // namespace

Result<std::unique_ptr<Queue>> Queue::create(const Device& device, std::uint64_t staging_bytes) {
  std::unique_ptr<Queue> q(new Queue(device));
  VkCommandPoolCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  info.queueFamilyIndex = device.queue_family();
  if (auto s = vk_check(device.fns().CreateCommandPool(device.handle(), &info, nullptr, &q->pool_), "vkCreateCommandPool"); !s)
    return s.error();
  auto staging = create_staging_buffer(device, staging_bytes);
  if (!staging) return staging.error();
  q->staging_ = *staging;
  return q;
}

Queue::~Queue() {
  const DeviceFns& f = device_.fns();
  for (auto& slot : slots_) {
    if (slot->in_flight) f.WaitForFences(device_.handle(), 1, &slot->fence, VK_TRUE, UINT64_MAX);
    f.DestroyFence(device_.handle(), slot->fence, nullptr);
    f.FreeCommandBuffers(device_.handle(), pool_, 1, &slot->commands);
  }
  destroy_staging_buffer(device_, staging_);
  if (pool_ != VK_NULL_HANDLE) f.DestroyCommandPool(device_.handle(), pool_, nullptr);
}

Status Queue::wait(Slot& slot) {
  if (!slot.in_flight) return {};
  const VkResult r = device_.fns().WaitForFences(device_.handle(), 1, &slot.fence, VK_TRUE, UINT64_MAX);
  if (r != VK_SUCCESS) {
    broken_ = vk_error(r, "vkWaitForFences");
    broken_->with_context("waiting for queued Vulkan work (the device is no longer usable)");
    return *broken_;
  }
  slot.in_flight = false;
  return {};
}

Result<Queue::Slot*> Queue::free_slot() {
  const DeviceFns& f = device_.fns();
  for (auto& slot : slots_) {
    if (slot->in_flight && f.WaitForFences(device_.handle(), 1, &slot->fence, VK_TRUE, 0) == VK_SUCCESS)
      slot->in_flight = false;
    if (!slot->in_flight) return slot.get();
  }
  if (slots_.size() < kMaxSlots) {
    auto slot = std::make_unique<Slot>();
    VkCommandBufferAllocateInfo alloc{};
    alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    alloc.commandPool = pool_;
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    if (auto s = vk_check(f.AllocateCommandBuffers(device_.handle(), &alloc, &slot->commands), "vkAllocateCommandBuffers"); !s)
      return s.error();
    VkFenceCreateInfo fence{};
    fence.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    if (auto s = vk_check(f.CreateFence(device_.handle(), &fence, nullptr, &slot->fence), "vkCreateFence"); !s) {
      f.FreeCommandBuffers(device_.handle(), pool_, 1, &slot->commands);
      return s.error();
    }
    slots_.push_back(std::move(slot));
    return slots_.back().get();
  }
  Slot& oldest = *slots_[next_ % slots_.size()];
  if (auto s = wait(oldest); !s) return s.error();
  return &oldest;
}

Status Queue::submit(const std::function<void(VkCommandBuffer)>& record, bool wait_for_it) {
  if (broken_) return *broken_;
  auto slot_or = free_slot();
  if (!slot_or) return slot_or.error();
  Slot& slot = **slot_or;
  for (std::size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].get() == &slot) next_ = i + 1;

  const DeviceFns& f = device_.fns();
  if (auto s = vk_check(f.ResetCommandBuffer(slot.commands, 0), "vkResetCommandBuffer"); !s) return s;
  VkCommandBufferBeginInfo begin{};
  begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  if (auto s = vk_check(f.BeginCommandBuffer(slot.commands, &begin), "vkBeginCommandBuffer"); !s) return s;
  full_barrier(f, slot.commands);
  record(slot.commands);
  if (auto s = vk_check(f.EndCommandBuffer(slot.commands), "vkEndCommandBuffer"); !s) return s;
  if (auto s = vk_check(f.ResetFences(device_.handle(), 1, &slot.fence), "vkResetFences"); !s) return s;
  VkSubmitInfo info{};
  info.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  info.commandBufferCount = 1;
  info.pCommandBuffers = &slot.commands;
  if (auto s = vk_check(f.QueueSubmit(device_.queue(), 1, &info, slot.fence), "vkQueueSubmit"); !s) return s;
  slot.in_flight = true;
  if (wait_for_it) return wait(slot);
  return {};
}

Status Queue::wait_idle() {
  if (broken_) return *broken_;
  for (auto& slot : slots_)
    if (auto s = wait(*slot); !s) return s;
  return {};
}

Status Queue::upload(const BufferRange& dst, std::span<const std::byte> src) {
  const DeviceFns& f = device_.fns();
  std::uint64_t done = 0;
  while (done < src.size()) {
    const std::uint64_t chunk = std::min<std::uint64_t>(staging_.buffer.size, src.size() - done);
    std::memcpy(staging_.mapped, src.data() + done, chunk);
    VkBufferCopy region{0, dst.offset + done, chunk};
    // Waiting here also frees the staging buffer for the next chunk.
    if (auto s = submit([&](VkCommandBuffer cb) { f.CmdCopyBuffer(cb, staging_.buffer.buffer, dst.buffer->buffer, 1, &region); }, true);
        !s)
      return std::move(s).with_context("uploading " + std::to_string(src.size()) + " bytes");
    done += chunk;
  }
  return {};
}

Status Queue::download(std::span<std::byte> dst, const BufferRange& src) {
  const DeviceFns& f = device_.fns();
  std::uint64_t done = 0;
  while (done < dst.size()) {
    const std::uint64_t chunk = std::min<std::uint64_t>(staging_.buffer.size, dst.size() - done);
    VkBufferCopy region{src.offset + done, 0, chunk};
    if (auto s = submit([&](VkCommandBuffer cb) { f.CmdCopyBuffer(cb, src.buffer->buffer, staging_.buffer.buffer, 1, &region); }, true);
        !s)
      return std::move(s).with_context("downloading " + std::to_string(dst.size()) + " bytes");
    std::memcpy(dst.data() + done, staging_.mapped, chunk);
    done += chunk;
  }
  return {};
}

Status Queue::copy(const BufferRange& dst, const BufferRange& src, std::uint64_t bytes) {
  if (bytes == 0) return {};
  const DeviceFns& f = device_.fns();
  VkBufferCopy region{src.offset, dst.offset, bytes};
  // Allocations of one memory block share its VkBuffer: compare handles,
  // not records.
  if (src.buffer->buffer == dst.buffer->buffer && src.offset < dst.offset + bytes && dst.offset < src.offset + bytes) {
    // vkCmdCopyBuffer forbids overlapping regions of one buffer: bounce
    // through the staging buffer, a chunk at a time, in a safe direction.
    const std::uint64_t step = staging_.buffer.size;
    const bool backwards = dst.offset > src.offset;
    for (std::uint64_t done = 0; done < bytes;) {
      const std::uint64_t chunk = std::min(step, bytes - done);
      const std::uint64_t at = backwards ? bytes - done - chunk : done;
      VkBufferCopy in{src.offset + at, 0, chunk};
      VkBufferCopy out{0, dst.offset + at, chunk};
      if (auto s = submit(
              [&](VkCommandBuffer cb) {
                f.CmdCopyBuffer(cb, src.buffer->buffer, staging_.buffer.buffer, 1, &in);
                full_barrier(f, cb);
                f.CmdCopyBuffer(cb, staging_.buffer.buffer, dst.buffer->buffer, 1, &out);
              },
              true);
          !s)
        return s;
      done += chunk;
    }
    return {};
  }
  return submit([&](VkCommandBuffer cb) { f.CmdCopyBuffer(cb, src.buffer->buffer, dst.buffer->buffer, 1, &region); }, true);
}

}  // namespace ballast::vulkan
