#include "backend.hpp"

#include "host_import.hpp"

#include <ballast/log.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string_view>
#include <cstdio>
#include <limits>

namespace ballast::vulkan {
namespace {

// Staging chunk for host<->device copies: large enough to amortise a
// submission, small enough to stay cheap on every driver.
constexpr std::uint64_t kStagingBytes = 16ull << 20;
// Kernels address operands with 32-bit byte offsets.
constexpr std::uint64_t kMaxOperandBytes = (1ull << 32) - 8;

const char* const kKnownOptions = "validation (on|off), max_workgroups (a positive integer)";

struct Options {
  bool validation = false;
  std::uint32_t max_workgroups = 0;  // 0: the device's limit
};

Result<Options> parse_options(const BackendConfig& config) {
  Options o;
  for (const auto& [key, value] : config.options) {
    if (key == "validation") {
      if (value == "on") {
        o.validation = true;
      } else if (value == "off") {
        o.validation = false;
      } else {
        return make_error(ErrorCode::invalid_argument, "option validation must be on or off, not '" + value + "'");
      }
    } else if (key == "max_workgroups") {
      std::uint32_t n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n == 0)
        return make_error(ErrorCode::invalid_argument, "option max_workgroups must be a positive integer, not '" + value + "'");
      o.max_workgroups = n;
    } else {
      return make_error(ErrorCode::invalid_argument,
                        "unknown option '" + key + "' for the vulkan backend; known options: " + kKnownOptions);
    }
  }
  return o;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

Result<const PhysicalDevice*> select(const std::vector<PhysicalDevice>& devices, const BackendConfig& config) {
  if (config.device_uuid) {
    std::string wanted = lower(*config.device_uuid);
    if (wanted.rfind("gpu-", 0) != 0) wanted = "gpu-" + wanted;
    std::string known;
    for (const auto& d : devices) {
      if (lower(d.info.uuid) == wanted) return &d;
      known += (known.empty() ? "" : ", ") + d.info.uuid;
    }
    return make_error(ErrorCode::not_found, "no Vulkan device has UUID " + *config.device_uuid + "; devices: " + known);
  }
  const int index = config.device_index.value_or(0);
  if (index < 0 || static_cast<std::size_t>(index) >= devices.size())
    return make_error(ErrorCode::not_found, "no Vulkan device " + std::to_string(index) + "; there are " +
                                                std::to_string(devices.size()) + " (0.." +
                                                std::to_string(devices.size() - 1) + ")");
  return &devices[static_cast<std::size_t>(index)];
}

}  // namespace

Result<std::vector<DeviceInfo>> list_devices() {
  auto instance = Instance::create(nullptr);
  if (!instance) return instance.error();
  auto devices = enumerate_devices(**instance);
  if (!devices) return devices.error();
  std::vector<DeviceInfo> out;
  for (const auto& d : *devices) out.push_back(d.info);
  return out;
}

Result<std::unique_ptr<VulkanBackend>> VulkanBackend::open(const BackendConfig& config) {
  auto options = parse_options(config);
  if (!options) return options.error();
  std::unique_ptr<VulkanBackend> b(new VulkanBackend());
  if (options->validation) b->log_ = std::make_shared<ValidationLog>();

  auto instance = Instance::create(b->log_.get());
  if (!instance) return instance.error();
  b->instance_ = std::move(*instance);
  auto devices = enumerate_devices(*b->instance_);
  if (!devices) return devices.error();
  auto chosen = select(*devices, config);
  if (!chosen) return chosen.error();
  auto device = Device::create(*b->instance_, **chosen);
  if (!device) return device.error();
  b->device_ = std::move(*device);
  auto queue = Queue::create(*b->device_, kStagingBytes);
  if (!queue) return queue.error();
  b->queue_ = std::move(*queue);

  const PhysicalDevice& physical = b->device_->physical();
  std::uint32_t max_groups = physical.properties.limits.maxComputeWorkGroupCount[0];
  if (options->max_workgroups != 0) max_groups = std::min(max_groups, options->max_workgroups);
  auto kernels = Kernels::create(*b->device_, std::max<std::uint32_t>(max_groups, 1));
  if (!kernels) return kernels.error();
  b->kernels_ = std::move(*kernels);

  Capabilities& c = b->capabilities_;
  c.host_registration = physical.host_import;
  // NVIDIA's driver pins imported host pages for writing, so it refuses a
  // write-protected mapping, and on an H200 (driver 580.159) one refused
  // import left every later vkAllocateMemory of the device failing. Read-only
  // registration is therefore not offered there: weights are uploaded.
  const bool pins_writable = physical.properties.vendorID == 0x10DE;
  c.read_only_registration = physical.host_import && !pins_writable;  // imports are never written by ballast
  if (physical.host_import && pins_writable)
    c.host_registration_note = "NVIDIA's Vulkan driver cannot import read-only (write-protected) host pages";
  c.import_alignment = physical.host_import ? physical.import_alignment : 1;
  c.max_single_allocation = physical.max_allocation;
  c.flushes_f16_subnormals = false;  // f16 conversion is integer logic in the shaders
  // Vulkan allows 2.5 ULP for f32 division, so quant_int8 codes may be one
  // off on a GPU; lavapipe (llvmpipe) divides correctly and is held to exact codes.
  c.int8_codes_within_one = std::string_view(physical.properties.deviceName).find("llvmpipe") == std::string_view::npos;
  c.unaligned_operands = true;       // shaders address 32-bit words and shift partial ones
  if (c.host_registration_note.empty()) c.host_registration_note = physical.host_import_note;
  if (auto s = b->pending_validation_error(); !s) return std::move(s).with_context("opening " + config.text);
  return b;
}

VulkanBackend::~VulkanBackend() {
  if (!device_) return;
  if (queue_) (void)queue_->wait_idle();
  // Whatever the caller did not release goes with the backend.
  for (Buffer& b : buffers_.take_all()) destroy_buffer(*device_, b);
  kernels_.reset();
  queue_.reset();
  device_.reset();
  instance_.reset();
  // No later call can report what the layer said while tearing down
  // (leaked objects, say): make it visible at least.
  if (log_)
    if (auto e = log_->take_pending()) log_message(LogLevel::error, "vulkan", "at teardown: " + e->to_string());
}

Status VulkanBackend::pending_validation_error() {
  if (!log_) return {};
  if (auto e = log_->take_pending()) return *e;
  return {};
}

Status VulkanBackend::check_memory_object_limit() const {
  // Each allocation and registration is one VkDeviceMemory; the staging
  // buffer is one more. Drivers cap how many may exist (4096 on some).
  const std::uint64_t limit = device_->physical().properties.limits.maxMemoryAllocationCount;
  const AllocationCounters c = buffers_.counters();
  if (c.live_allocations + c.live_registrations + 1 >= limit)
    return make_error(ErrorCode::out_of_memory, "this device allows " + std::to_string(limit) +
                                                    " live memory allocations (maxMemoryAllocationCount) and ballast uses "
                                                    "one per allocation or registration; free some first");
  return {};
}

Result<BufferRange> VulkanBackend::resolve(DevicePtr ptr, std::uint64_t offset, std::uint64_t bytes,
                                           std::string_view operand, bool writes) const {
  if (offset > std::numeric_limits<DevicePtr>::max() - ptr)
    return make_error(ErrorCode::overflow, std::string(operand) + ": pointer + offset overflows 64 bits");
  auto range = buffers_.resolve(ptr + offset, bytes, operand);
  if (!range) return range.error();
  if (writes && range->buffer->read_only)
    return make_error(ErrorCode::invalid_argument,
                      std::string(operand) + ": the range is a read-only host registration and cannot be written");
  return range;
}

Result<DevicePtr> VulkanBackend::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s.error();
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    return make_error(ErrorCode::invalid_argument, "alignment must be a power of two, not " + std::to_string(alignment));
  if (alignment > capabilities_.max_single_allocation)
    return make_error(ErrorCode::invalid_argument, "alignment " + std::to_string(alignment) +
                                                       " exceeds the largest allocation this device can make");
  if (auto s = check_memory_object_limit(); !s) return std::move(s).with_context("allocating " + std::to_string(bytes) + " bytes");
  auto b = create_device_buffer(*device_, bytes, alignment);
  if (!b) return std::move(b.error()).with_context("allocating " + std::to_string(bytes) + " bytes on " + info().name);
  b->kind = Buffer::Kind::allocation;
  const DevicePtr ptr = b->user_ptr;
  buffers_.insert(*b);
  return ptr;
}

Status VulkanBackend::free(DevicePtr ptr) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  auto b = buffers_.take(ptr, Buffer::Kind::allocation);
  if (!b) return std::move(b.error()).with_context("freeing device memory");
  // A launch still in flight may use it.
  Status idle = queue_->wait_idle();
  destroy_buffer(*device_, *b);
  return idle;
}

AllocationCounters VulkanBackend::counters() const {
  std::lock_guard lock(mutex_);
  return buffers_.counters();
}

Status VulkanBackend::copy_to_device(DevicePtr dst, std::uint64_t dst_offset, std::span<const std::byte> src) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  auto range = resolve(dst, dst_offset, src.size(), "dst", true);
  if (!range) return std::move(range.error()).with_context("copying host to device");
  if (src.empty()) return {};
  return queue_->upload(*range, src);
}

Status VulkanBackend::copy_to_host(std::span<std::byte> dst, DevicePtr src, std::uint64_t src_offset) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  auto range = resolve(src, src_offset, dst.size(), "src", false);
  if (!range) return std::move(range.error()).with_context("copying device to host");
  if (dst.empty()) return {};
  return queue_->download(dst, *range);
}

Status VulkanBackend::copy_device(DevicePtr dst, std::uint64_t dst_offset, DevicePtr src, std::uint64_t src_offset,
                                  std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  auto to = resolve(dst, dst_offset, bytes, "dst", true);
  if (!to) return std::move(to.error()).with_context("copying device to device");
  auto from = resolve(src, src_offset, bytes, "src", false);
  if (!from) return std::move(from.error()).with_context("copying device to device");
  return queue_->copy(*to, *from, bytes);
}

Result<DevicePtr> VulkanBackend::register_host(const void* host, std::uint64_t bytes, HostAccess access) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s.error();
  if (auto s = check_memory_object_limit(); !s) return std::move(s).with_context("registering host memory");
  if (access == HostAccess::read_only && capabilities_.host_registration && !capabilities_.read_only_registration)
    return make_error(ErrorCode::unsupported, "registering host memory read-only: " + capabilities_.host_registration_note);
  auto b = import_host_range(*device_, host, bytes, access == HostAccess::read_only);
  if (!b) return std::move(b.error()).with_context("registering " + std::to_string(bytes) + " bytes of host memory");
  const DevicePtr ptr = b->user_ptr;
  buffers_.insert(*b);
  return ptr;
}

Status VulkanBackend::unregister_host(DevicePtr ptr) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  auto b = buffers_.take(ptr, Buffer::Kind::registration);
  if (!b) return std::move(b.error()).with_context("unregistering host memory");
  Status idle = queue_->wait_idle();
  destroy_buffer(*device_, *b);
  return idle;
}

Status VulkanBackend::launch(const DerivationLaunch& l) {
  const std::string what = "launching " + std::string(derivation_name(l.kind));
  auto sizes = derivation_sizes(l);
  if (!sizes) return std::move(sizes.error()).with_context(what);
  struct Operand {
    const char* name;
    DevicePtr ptr;
    std::uint64_t bytes;
    bool writes;
  };
  const Operand operands[] = {{"src", l.src, sizes->src_bytes, false},
                              {"scales", l.scales, sizes->scales_bytes, false},
                              {"zero_points", l.zero_point, sizes->zero_point_bytes, false},
                              {"dst", l.dst, sizes->dst_bytes, true},
                              {"dst2", l.dst2, sizes->dst2_bytes, true}};
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  for (const Operand& op : operands) {
    if (op.bytes == 0) continue;
    if (op.bytes > kMaxOperandBytes)
      return make_error(ErrorCode::unsupported, std::string(op.name) + ": " + std::to_string(op.bytes) +
                                                    " bytes exceed the 4 GiB a Vulkan kernel operand may span")
          .with_context(what);
    auto range = resolve(op.ptr, 0, op.bytes, op.name, op.writes);
    if (!range) return std::move(range.error()).with_context(what);
  }
  if (sizes->dst_bytes == 0 && sizes->dst2_bytes == 0) return {};
  auto plan = kernels_->plan(l, *sizes);
  if (!plan) return std::move(plan.error()).with_context(what);
  const auto& dispatches = *plan;
  Status s = queue_->submit([&](VkCommandBuffer cb) { kernels_->record(cb, dispatches); }, false);
  return std::move(s).with_context(what);
}

Status VulkanBackend::synchronize() {
  std::lock_guard lock(mutex_);
  Status s = queue_->wait_idle();
  if (!s) return std::move(s).with_context("synchronizing");
  return pending_validation_error();
}

}  // namespace ballast::vulkan
