// The backend's one queue: command buffers, fences and staged copies.
//
// Every command buffer starts with a full memory barrier, so work runs in
// submission order (a copy sees the results of the launch before it)
// without tracking which buffer each command touches. Launches are left
// in flight; copies wait for their own completion, which implies
// everything submitted before them. Not thread-safe: the backend holds its
// mutex around every call.
#pragma once

#include "allocator.hpp"

#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace ballast::vulkan {

class Queue {
 public:
  static Result<std::unique_ptr<Queue>> create(const Device& device, std::uint64_t staging_bytes);
  ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Records `record` after the leading barrier, submits, and waits for it
  // when `wait`.
  Status submit(const std::function<void(VkCommandBuffer)>& record, bool wait);
  // Waits for everything submitted so far.
  Status wait_idle();

  Status upload(const BufferRange& dst, std::span<const std::byte> src);
  Status download(std::span<std::byte> dst, const BufferRange& src);
  Status copy(const BufferRange& dst, const BufferRange& src, std::uint64_t bytes);

 private:
  struct Slot {
    VkCommandBuffer commands = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    bool in_flight = false;
  };
  explicit Queue(const Device& device) : device_(device) {}
  Result<Slot*> free_slot();
  Status wait(Slot& slot);

  const Device& device_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::size_t next_ = 0;  // round-robin over slots_, so the oldest is reused first
  MappedBuffer staging_;
  // A fence wait that failed (device lost): every later call reports it.
  std::optional<Error> broken_;
};

}  // namespace ballast::vulkan
