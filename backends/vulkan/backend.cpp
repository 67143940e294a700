#include "backend.hpp"

#include "host_import.hpp"

#include <ballast/log.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string_view>
#include <cstdio>
#include <limits>
#include <new>

namespace ballast::vulkan {
namespace {

// Staging chunk for host<->device copies: large enough to amortise a
// submission, small enough to stay cheap on every driver.
constexpr std::uint64_t kStagingBytes = 16ull << 20;
// Kernels address operands with 32-bit byte offsets.
constexpr std::uint64_t kMaxOperandBytes = (1ull << 32) - 8;

// A range's cookie is its Buffer record, made here and freed when the
// range ends.
std::uint64_t cookie_of(Buffer* b) { return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(b)); }
Buffer& buffer_of(std::uint64_t cookie) { return *reinterpret_cast<Buffer*>(static_cast<std::uintptr_t>(cookie)); }

// Where an operand the core resolved lies in its buffer.
BufferRange range_of(const ResolvedOperand& o) {
  const Buffer& b = buffer_of(o.cookie);
  return BufferRange{&b, (b.user_ptr - b.address) + o.offset};
}

const char* const kKnownOptions =
    "validation (on|off), max_workgroups (a positive integer), max_allocation (a positive number of bytes), "
    "max_memory_allocations (a positive integer)";

struct Options {
  bool validation = false;
  std::uint32_t max_workgroups = 0;  // 0: the device's limit
  std::uint64_t max_allocation = 0;  // 0: the device's limit
  std::uint64_t max_memory_allocations = 0;  // 0: the device's limit
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
    } else if (key == "max_allocation") {
      std::uint64_t n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n == 0)
        return make_error(ErrorCode::invalid_argument,
                          "option max_allocation must be a positive number of bytes, not '" + value + "'");
      o.max_allocation = n;
    } else if (key == "max_memory_allocations") {
      std::uint64_t n = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || end != value.data() + value.size() || n == 0)
        return make_error(ErrorCode::invalid_argument,
                          "option max_memory_allocations must be a positive integer, not '" + value + "'");
      o.max_memory_allocations = n;
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
  PhysicalDevice physical_device = **chosen;
  // Above the device's own limit, requests reach the driver, which answers
  // them itself (a real VK_ERROR_OUT_OF_DEVICE_MEMORY, for tests).
  if (options->max_allocation != 0) physical_device.max_allocation = options->max_allocation;
  auto device = Device::create(*b->instance_, std::move(physical_device));
  if (!device) return device.error();
  b->device_ = std::move(*device);
  const PhysicalDevice& physical = b->device_->physical();
  b->memory_objects_ =
      std::make_unique<MemoryObjects>(physical.properties.limits.maxMemoryAllocationCount, options->max_memory_allocations);
  if (auto s = b->memory_objects_->check_room("the staging buffer"); !s) return s.error();
  auto queue = Queue::create(*b->device_, kStagingBytes);
  if (!queue) return queue.error();
  b->queue_ = std::move(*queue);
  b->memory_objects_->add(MemoryObjects::Kind::staging);
  b->suballocator_ = std::make_unique<SubAllocator>(*b->device_, *b->memory_objects_,
                                                    std::min(kBlockBytes, physical.max_allocation));

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
  // A CPU implementation (lavapipe) reads imported host memory in its own
  // worker threads, which block SIGBUS: a truncated file's page there kills
  // the process before any handler runs (Capabilities::guarded_host_reads).
  c.guarded_host_reads = physical.properties.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
  if (c.host_registration_note.empty()) c.host_registration_note = physical.host_import_note;
  if (auto s = b->pending_validation_error(); !s) return std::move(s).with_context("opening " + config.text);
  return b;
}

VulkanBackend::~VulkanBackend() {
  if (!device_) return;
  if (queue_) (void)queue_->wait_idle();
  // The core freed and unregistered whatever the caller leaked before
  // destroying this (TableBackend); the blocks go with the sub-allocator.
  suballocator_.reset();
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

VulkanBackend::MemoryObjectCount VulkanBackend::memory_objects() const {
  std::lock_guard lock(mutex_);
  return {memory_objects_->live(), memory_objects_->peak(), memory_objects_->limit(),
          memory_objects_->live(MemoryObjects::Kind::block)};
}

Result<BackendRange> VulkanBackend::do_allocate(std::uint64_t bytes, std::uint64_t alignment) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s.error();
  if (alignment > capabilities_.max_single_allocation)
    return make_error(ErrorCode::invalid_argument, "alignment " + std::to_string(alignment) +
                                                       " exceeds the largest allocation this device can make");
  auto b = suballocator_->allocate(bytes, alignment);
  if (!b) return std::move(b.error()).with_context("on " + do_info().name);
  auto* record = new (std::nothrow) Buffer(*b);
  if (record == nullptr) {
    suballocator_->release(*b);
    return make_error(ErrorCode::out_of_memory, "no host memory to record the buffer");
  }
  return BackendRange{record->user_ptr, cookie_of(record)};
}

Status VulkanBackend::do_free(const BackendRange& allocation, std::uint64_t) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  // A launch still in flight may use it; if the queue cannot drain, the
  // buffer stays (live and counted) rather than be destroyed under a kernel.
  if (Status idle = queue_->wait_idle(); !idle) return idle;
  Buffer* record = &buffer_of(allocation.cookie);
  suballocator_->release(*record);
  delete record;
  return {};
}

Status VulkanBackend::do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  return queue_->upload(range_of(dst), src);
}

Status VulkanBackend::do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  return queue_->download(dst, range_of(src));
}

Status VulkanBackend::do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  return queue_->copy(range_of(dst), range_of(src), bytes);
}

Result<BackendRange> VulkanBackend::do_register_host(const void* host, std::uint64_t bytes, HostAccess access) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s.error();
  // An import is one more VkDeviceMemory; an empty block kept for reuse
  // gives way to it.
  if (!memory_objects_->has_room()) suballocator_->drop_cached_block();
  if (auto s = memory_objects_->check_room("registering " + std::to_string(bytes) + " bytes of host memory"); !s)
    return s.error();
  auto b = import_host_range(*device_, host, bytes, access == HostAccess::read_only);
  if (!b) return b.error();
  auto* record = new (std::nothrow) Buffer(*b);
  if (record == nullptr) {
    destroy_buffer(*device_, *b);
    return make_error(ErrorCode::out_of_memory, "no host memory to record the buffer");
  }
  memory_objects_->add(MemoryObjects::Kind::import);
  return BackendRange{record->user_ptr, cookie_of(record)};
}

Status VulkanBackend::do_unregister_host(const BackendRange& registration, std::uint64_t, HostAccess) {
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  if (Status idle = queue_->wait_idle(); !idle) return idle;
  Buffer* record = &buffer_of(registration.cookie);
  destroy_buffer(*device_, *record);
  delete record;
  memory_objects_->remove(MemoryObjects::Kind::import);
  return {};
}

Status VulkanBackend::do_launch(const DerivationLaunch& l, const DerivationSizes& sizes, const LaunchOperands&) {
  const std::uint64_t operand_bytes[] = {sizes.src_bytes, sizes.scales_bytes, sizes.zero_point_bytes, sizes.dst_bytes,
                                         sizes.dst2_bytes};
  for (const std::uint64_t bytes : operand_bytes)
    if (bytes > kMaxOperandBytes)
      return make_error(ErrorCode::unsupported, "an operand of " + std::to_string(bytes) +
                                                    " bytes exceeds the 4 GiB a Vulkan kernel operand may span");
  std::lock_guard lock(mutex_);
  if (auto s = pending_validation_error(); !s) return s;
  auto plan = kernels_->plan(l, sizes);
  if (!plan) return plan.error();
  const auto& dispatches = *plan;
  return queue_->submit([&](VkCommandBuffer cb) { kernels_->record(cb, dispatches); }, false);
}

Status VulkanBackend::do_synchronize() {
  std::lock_guard lock(mutex_);
  if (Status s = queue_->wait_idle(); !s) return s;
  return pending_validation_error();
}

}  // namespace ballast::vulkan
