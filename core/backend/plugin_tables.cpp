#include "backend/plugin_tables.hpp"

#include <ballast/plugin_abi.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

namespace ballast::detail {
namespace {

// The C codes are ErrorCode's values; a mismatch would mislabel every error.
static_assert(BALLAST_INVALID_ARGUMENT == static_cast<int>(ErrorCode::invalid_argument));
static_assert(BALLAST_NOT_FOUND == static_cast<int>(ErrorCode::not_found));
static_assert(BALLAST_OUT_OF_BOUNDS == static_cast<int>(ErrorCode::out_of_bounds));
static_assert(BALLAST_OVERFLOW == static_cast<int>(ErrorCode::overflow));
static_assert(BALLAST_UNSUPPORTED == static_cast<int>(ErrorCode::unsupported));
static_assert(BALLAST_IO == static_cast<int>(ErrorCode::io));
static_assert(BALLAST_UNAVAILABLE == static_cast<int>(ErrorCode::unavailable));
static_assert(BALLAST_OUT_OF_MEMORY == static_cast<int>(ErrorCode::out_of_memory));
static_assert(BALLAST_DEVICE_ERROR == static_cast<int>(ErrorCode::device_error));
static_assert(BALLAST_INTERNAL == static_cast<int>(ErrorCode::internal));
static_assert(BALLAST_HOST_READ_ONLY == static_cast<int>(HostAccess::read_only));
static_assert(BALLAST_HOST_READ_WRITE == static_cast<int>(HostAccess::read_write));

// ABI 1.0's tables end where 1.1 added get_proc_address.
constexpr std::size_t kPluginPrefix = offsetof(ballast_plugin, ctx);
constexpr std::size_t kPlugin_1_0 = offsetof(ballast_plugin, get_proc_address);
constexpr std::size_t kBackend_1_0 = offsetof(ballast_backend, get_proc_address);
// Every field of the device info and the capabilities is ABI 1.0's: a
// smaller struct is no table of this major (a struct_size of 0 read as
// "no fields" would list a nameless device of index 0).
// The end of each struct's last 1.0 field, not its sizeof: a later minor
// appending a field must not refuse every plugin built before it.
constexpr std::size_t kInfo_1_0 = offsetof(ballast_device_info, memory_bytes) + sizeof(std::uint64_t);
constexpr std::size_t kCapabilities_1_0 = offsetof(ballast_capabilities, host_registration_note) + sizeof(const char*);
static_assert(kInfo_1_0 == sizeof(ballast_device_info) && kCapabilities_1_0 == sizeof(ballast_capabilities),
              "a field was appended: keep the 1.0 sizes above, read the new field only where struct_size "
              "holds it (BALLAST_HAS_FIELD), and change this check");

// The ballast_error a call fills: set() keeps the first report.
struct ErrorSlot {
  ballast_error c{sizeof(ballast_error), &ErrorSlot::set};
  std::optional<Error> error;

  static void set(ballast_error* self, int32_t code, const char* message, const char* native) {
    auto* slot = reinterpret_cast<ErrorSlot*>(self);  // c is the first member
    if (slot->error) return;
    try {
      Error e;
      e.code = code > 0 && code <= static_cast<int32_t>(ErrorCode::internal) ? static_cast<ErrorCode>(code)
                                                                            : ErrorCode::internal;
      e.message = message != nullptr ? message : "";
      if (e.code == ErrorCode::internal && code != BALLAST_INTERNAL)
        e.message = "(plugin error code " + std::to_string(code) + ") " + e.message;
      if (native != nullptr) e.native = native;
      slot->error = std::move(e);
    } catch (...) {  // no memory for the text: the call still fails
    }
  }

  // The Status a C call's result means.
  Status status(int32_t code) {
    if (code == BALLAST_OK) return {};
    if (error) {
      // A plugin that set one code and returned another: the return wins.
      if (code > 0 && code <= static_cast<int32_t>(ErrorCode::internal)) error->code = static_cast<ErrorCode>(code);
      return std::move(*error);
    }
    if (code > 0 && code <= static_cast<int32_t>(ErrorCode::internal))
      return make_error(static_cast<ErrorCode>(code), "the plugin reported an error without a message");
    return make_error(ErrorCode::internal, "the plugin returned error code " + std::to_string(code) + " without a message");
  }
};
static_assert(offsetof(ErrorSlot, c) == 0);

std::string text(const char* s) { return s != nullptr ? s : ""; }

DeviceInfo to_info(const ballast_device_info* d) {
  DeviceInfo out;
  if (d == nullptr) return out;
  using T = ballast_device_info;
  if (BALLAST_HAS_FIELD(T, d, backend)) out.backend = text(d->backend);
  if (BALLAST_HAS_FIELD(T, d, index)) out.index = d->index;
  if (BALLAST_HAS_FIELD(T, d, name)) out.name = text(d->name);
  if (BALLAST_HAS_FIELD(T, d, uuid)) out.uuid = text(d->uuid);
  if (BALLAST_HAS_FIELD(T, d, driver)) out.driver = text(d->driver);
  if (BALLAST_HAS_FIELD(T, d, memory_bytes)) out.memory_bytes = d->memory_bytes;
  return out;
}

Capabilities to_capabilities(const ballast_capabilities* c) {
  Capabilities out;  // absent fields keep Capabilities' defaults
  if (c == nullptr) return out;
  using T = ballast_capabilities;
  if (BALLAST_HAS_FIELD(T, c, host_registration)) out.host_registration = c->host_registration != 0;
  if (BALLAST_HAS_FIELD(T, c, read_only_registration)) out.read_only_registration = c->read_only_registration != 0;
  if (BALLAST_HAS_FIELD(T, c, flushes_f16_subnormals)) out.flushes_f16_subnormals = c->flushes_f16_subnormals != 0;
  if (BALLAST_HAS_FIELD(T, c, int8_codes_within_one)) out.int8_codes_within_one = c->int8_codes_within_one != 0;
  if (BALLAST_HAS_FIELD(T, c, unaligned_operands)) out.unaligned_operands = c->unaligned_operands != 0;
  if (BALLAST_HAS_FIELD(T, c, guarded_host_reads)) out.guarded_host_reads = c->guarded_host_reads != 0;
  if (BALLAST_HAS_FIELD(T, c, import_alignment)) out.import_alignment = c->import_alignment;
  if (BALLAST_HAS_FIELD(T, c, max_single_allocation)) out.max_single_allocation = c->max_single_allocation;
  if (BALLAST_HAS_FIELD(T, c, host_registration_note)) out.host_registration_note = text(c->host_registration_note);
  return out;
}

ballast_operand to_c(const ResolvedOperand& o, std::uint64_t bytes) {
  return {o.ptr, o.cookie, o.offset, bytes};
}

Error abi_error(std::string message) { return make_error(ErrorCode::abi_mismatch, std::move(message)); }

std::string too_small(std::string_view what, std::size_t size, std::size_t least) {
  return std::to_string(size) + "-byte " + std::string(what) + " (struct_size), smaller than ABI 1.0's (" +
         std::to_string(least) + ")";
}

// Copies the first `size` bytes of a table into a zeroed one: whatever a
// smaller (older) table lacks reads as absent.
template <class Table>
Table copy_of(const Table* table, std::size_t size) {
  Table out{};
  std::memcpy(static_cast<void*>(&out), table, size < sizeof(Table) ? size : sizeof(Table));
  out.struct_size = size;
  return out;
}

class TableBackend final : public GpuBackend {
 public:
  explicit TableBackend(const ballast_backend& table)
      : table_(table), info_(to_info(table.info)), caps_(to_capabilities(table.capabilities)) {}

  // The plugin destroys a device with nothing live: the core frees what
  // the caller leaked first (one place for it, not one per backend).
  ~TableBackend() override {
    release_live_ranges();
    table_.destroy(table_.ctx);
  }

 private:
  const DeviceInfo& do_info() const override { return info_; }
  const Capabilities& do_capabilities() const override { return caps_; }

  // The kinds the plugin's launch() knows: ABI 1.2's kind_count, else the
  // 9 of ABI 1.1 (its tables have no such field; copy_of zeroed it).
  std::uint32_t kind_count() const noexcept {
    return BALLAST_HAS_FIELD(ballast_backend, &table_, kind_count) ? table_.kind_count : 9u;
  }

  Result<BackendRange> do_allocate(std::uint64_t bytes, std::uint64_t alignment) override {
    ErrorSlot e;
    BackendRange r;
    if (Status s = e.status(table_.allocate(table_.ctx, bytes, alignment, &r.ptr, &r.cookie, &e.c)); !s) return s;
    return r;
  }
  Status do_free(const BackendRange& a, std::uint64_t bytes) override {
    ErrorSlot e;
    return e.status(table_.free(table_.ctx, a.ptr, a.cookie, bytes, &e.c));
  }
  Status do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) override {
    ErrorSlot e;
    const ballast_operand d = to_c(dst, src.size());
    return e.status(table_.copy_to_device(table_.ctx, &d, src.data(), src.size(), &e.c));
  }
  Status do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) override {
    ErrorSlot e;
    const ballast_operand s = to_c(src, dst.size());
    return e.status(table_.copy_to_host(table_.ctx, dst.data(), &s, dst.size(), &e.c));
  }
  Status do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) override {
    ErrorSlot e;
    const ballast_operand d = to_c(dst, bytes), s = to_c(src, bytes);
    return e.status(table_.copy_device(table_.ctx, &d, &s, bytes, &e.c));
  }
  Result<BackendRange> do_register_host(const void* host, std::uint64_t bytes, HostAccess access) override {
    ErrorSlot e;
    BackendRange r;
    if (Status s = e.status(table_.register_host(table_.ctx, host, bytes, static_cast<int32_t>(access), &r.ptr,
                                                 &r.cookie, &e.c));
        !s)
      return s;
    return r;
  }
  Status do_unregister_host(const BackendRange& r, std::uint64_t bytes, HostAccess access) override {
    ErrorSlot e;
    return e.status(table_.unregister_host(table_.ctx, r.ptr, r.cookie, bytes, static_cast<int32_t>(access), &e.c));
  }
  Status do_launch(const DerivationLaunch& l, const DerivationSizes& s, const LaunchOperands& o) override {
    if (static_cast<std::uint32_t>(l.kind) >= kind_count())
      return make_error(ErrorCode::unsupported,
                        std::string(derivation_name(l.kind)) + ": the " + info_.backend + " plugin knows " +
                            std::to_string(kind_count()) + " derivation kinds, not this later one: rebuild it");
    ballast_launch c{};
    c.struct_size = sizeof c;
    c.kind = static_cast<int32_t>(l.kind);
    c.src_type = static_cast<int32_t>(l.src_type);
    c.zero_points = static_cast<int32_t>(l.zero_points);
    c.block_size = l.block_size;
    c.rows = l.rows;
    c.cols = l.cols;
    c.src = to_c(o.src, s.src_bytes);
    c.scales = to_c(o.scales, s.scales_bytes);
    c.zero_point = to_c(o.zero_point, s.zero_point_bytes);
    c.dst = to_c(o.dst, s.dst_bytes);
    c.dst2 = to_c(o.dst2, s.dst2_bytes);
    c.src_cols = l.src_cols;
    c.col_offset = l.col_offset;
    ErrorSlot e;
    return e.status(table_.launch(table_.ctx, &c, &e.c));
  }
  Status do_synchronize() override {
    ErrorSlot e;
    return e.status(table_.synchronize(table_.ctx, &e.c));
  }
  void* do_extension(const char* name) override {
    return table_.get_proc_address != nullptr ? table_.get_proc_address(table_.ctx, name) : nullptr;
  }

  const ballast_backend table_;
  const DeviceInfo info_;
  const Capabilities caps_;
};

// Which plugin calls this thread is inside of. A plugin's devices() that
// lists the backends (list_backends() names the plugin itself), or an
// open() that opens its own backend, would come straight back into the
// same function without end and overflow the stack; the nested call is
// refused instead, and the outer one goes on. A frame lives on the stack
// of the call it marks, so nothing is allocated.
enum class PluginCall { devices, open };

class InsideCall {
 public:
  InsideCall(const PluginTable* plugin, PluginCall call) noexcept : plugin_(plugin), call_(call), outer_(innermost_) {
    innermost_ = this;
  }
  ~InsideCall() { innermost_ = outer_; }
  InsideCall(const InsideCall&) = delete;
  InsideCall& operator=(const InsideCall&) = delete;

  static bool active(const PluginTable* plugin, PluginCall call) noexcept {
    for (const InsideCall* f = innermost_; f != nullptr; f = f->outer_)
      if (f->plugin_ == plugin && f->call_ == call) return true;
    return false;
  }

 private:
  const PluginTable* plugin_;
  PluginCall call_;
  const InsideCall* outer_;
  static thread_local const InsideCall* innermost_;
};
thread_local const InsideCall* InsideCall::innermost_ = nullptr;

Error called_back(const std::string& name, const char* call) {
  return make_error(ErrorCode::unsupported,
                    "backend \"" + name + "\": its plugin's " + call + " called back into the registry for \"" + name +
                        "\" itself (list_backends() or open_backend(\"" + name + "\") from inside " + call +
                        "), which would recurse without end: refused");
}

// Owns a backend table until it is adopted: destroyed if refused.
struct DestroyOnRefusal {
  const ballast_backend* table;
  ~DestroyOnRefusal() {
    if (table != nullptr && table->struct_size >= offsetof(ballast_backend, destroy) + sizeof table->destroy &&
        table->destroy != nullptr)
      table->destroy(table->ctx);
  }
};

}  // namespace

std::string api_version_text(std::uint32_t major, std::uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

Result<std::unique_ptr<GpuBackend>> adopt_backend_table(const ballast_backend* table) {
  if (table == nullptr) return abi_error("the plugin's open() returned no backend table");
  DestroyOnRefusal guard{table};
  if (table->struct_size < kBackend_1_0)
    return abi_error("the backend table is " + std::to_string(table->struct_size) + " bytes, smaller than ABI 1.0's (" +
                     std::to_string(kBackend_1_0) + ")");
  const ballast_backend copy = copy_of(table, table->struct_size);
  // Every required entry, named when missing: the plugin's author reads this.
  const std::pair<const char*, bool> required[] = {
      {"destroy", copy.destroy != nullptr},
      {"allocate", copy.allocate != nullptr},
      {"free", copy.free != nullptr},
      {"copy_to_device", copy.copy_to_device != nullptr},
      {"copy_to_host", copy.copy_to_host != nullptr},
      {"copy_device", copy.copy_device != nullptr},
      {"register_host", copy.register_host != nullptr},
      {"unregister_host", copy.unregister_host != nullptr},
      {"launch", copy.launch != nullptr},
      {"synchronize", copy.synchronize != nullptr},
      {"info", copy.info != nullptr},
      {"capabilities", copy.capabilities != nullptr},
  };
  std::string missing;
  for (const auto& [name, present] : required)
    if (!present) missing += (missing.empty() ? "" : ", ") + std::string(name);
  if (!missing.empty()) return abi_error("the backend table lacks a required entry: " + missing + " (NULL)");
  if (copy.info->struct_size < kInfo_1_0)
    return abi_error("the backend table's info is a " +
                     too_small("ballast_device_info", copy.info->struct_size, kInfo_1_0));
  if (copy.capabilities->struct_size < kCapabilities_1_0)
    return abi_error("the backend table's capabilities are a " +
                     too_small("ballast_capabilities", copy.capabilities->struct_size, kCapabilities_1_0));
  // ABI 1.2 plugins were built with headers of at least the nine kinds of
  // 1.1 (transpose to quant_int8_given_max): fewer is no table of 1.2.
  if (BALLAST_HAS_FIELD(ballast_backend, &copy, kind_count) && copy.kind_count < 9)
    return abi_error("the backend table says its launch() knows " + std::to_string(copy.kind_count) +
                     " derivation kinds (kind_count); a table of ABI 1.2 or later knows at least 9");
  try {
    auto backend = std::make_unique<TableBackend>(copy);
    guard.table = nullptr;
    return std::unique_ptr<GpuBackend>(std::move(backend));
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::out_of_memory, "no host memory to wrap the backend");
  }
}

PluginTable::PluginTable(const ballast_plugin& table) : table_(table), name_(table.name) {}

Result<std::unique_ptr<PluginTable>> PluginTable::check(const ballast_plugin* table, std::string_view expected_name) {
  if (table == nullptr) return abi_error(std::string(BALLAST_PLUGIN_ENTRY_SYMBOL) + "() returned null");
  const std::string core = api_version_text(BALLAST_PLUGIN_API_MAJOR, BALLAST_PLUGIN_API_MINOR);
  if (table->struct_size < kPluginPrefix)
    return abi_error("the plugin table is " + std::to_string(table->struct_size) +
                     " bytes, too small to hold a version; core plugin ABI is " + core);
  if (table->api_major != BALLAST_PLUGIN_API_MAJOR)
    return abi_error("plugin ABI " + api_version_text(table->api_major, table->api_minor) + ", core plugin ABI " + core +
                     " (accepts " + std::to_string(BALLAST_PLUGIN_API_MAJOR) + ".x)");
  if (table->struct_size < kPlugin_1_0)
    return abi_error("plugin ABI " + api_version_text(table->api_major, table->api_minor) + " with a " +
                     std::to_string(table->struct_size) + "-byte table, smaller than ABI 1.0's (" +
                     std::to_string(kPlugin_1_0) + ")");
  const auto describe = [](const char* s) { return s == nullptr ? std::string("(null)") : "\"" + std::string(s) + "\""; };
  if (table->name == nullptr || !plugin_detail::is_backend_name(table->name))
    return abi_error("plugin names itself " + describe(table->name) + ", not a lowercase identifier");
  if (!expected_name.empty() && std::string_view(table->name) != expected_name)
    return abi_error("plugin names itself " + describe(table->name) + ", expected \"" + std::string(expected_name) + "\"");
  const ballast_plugin copy = copy_of(table, table->struct_size);
  if (copy.devices == nullptr || copy.open == nullptr) return abi_error("the plugin table has no devices() or open()");
  return std::unique_ptr<PluginTable>(new PluginTable(copy));
}

Result<std::vector<DeviceInfo>> PluginTable::devices() const {
  struct Collected {
    std::vector<DeviceInfo> devices;
    std::size_t reported = 0;
    std::optional<std::size_t> null_at;  // the first device reported as a null pointer
    std::optional<std::pair<std::size_t, std::size_t>> small_at;  // the first too small: position, struct_size
    bool failed = false;
  } collected;
  const auto emit = [](void* user, const ballast_device_info* d) {
    auto* c = static_cast<Collected*>(user);
    const std::size_t at = c->reported++;
    if (d == nullptr) {
      if (!c->null_at) c->null_at = at;
      return;
    }
    if (d->struct_size < kInfo_1_0) {
      if (!c->small_at) c->small_at = std::pair{at, d->struct_size};
      return;
    }
    try {
      c->devices.push_back(to_info(d));
    } catch (...) {
      c->failed = true;
    }
  };
  if (InsideCall::active(this, PluginCall::devices)) return called_back(name_, "devices()");
  const InsideCall inside(this, PluginCall::devices);
  ErrorSlot e;
  if (Status s = e.status(table_.devices(table_.ctx, emit, &collected, &e.c)); !s) return s;
  if (collected.failed) return make_error(ErrorCode::out_of_memory, "no host memory to list the devices");
  // A device list the registry can trust: every entry there, and each
  // index its position (a config string's index picks by it).
  if (collected.null_at)
    return abi_error("devices() reported device " + std::to_string(*collected.null_at) + " as a null pointer");
  if (collected.small_at)
    return abi_error("devices() reported device " + std::to_string(collected.small_at->first) + " in a " +
                     too_small("ballast_device_info", collected.small_at->second, kInfo_1_0));
  for (std::size_t i = 0; i < collected.devices.size(); ++i)
    if (collected.devices[i].index != static_cast<int>(i))
      return abi_error("devices() reported \"" + collected.devices[i].name + "\" with index " +
                       std::to_string(collected.devices[i].index) + " in position " + std::to_string(i) +
                       " (indices are 0, 1, ... in the order reported)");
  return std::move(collected.devices);
}

Result<std::unique_ptr<GpuBackend>> PluginTable::open(const BackendConfig& config) const {
  if (InsideCall::active(this, PluginCall::open)) return called_back(name_, "open()");
  const InsideCall inside(this, PluginCall::open);
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : config.options) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  ballast_backend_config c{};
  c.struct_size = sizeof c;
  c.text = config.text.c_str();
  c.name = config.name.c_str();
  c.has_device_index = config.device_index.has_value() ? 1 : 0;
  c.device_index = config.device_index.value_or(0);
  c.device_uuid = config.device_uuid ? config.device_uuid->c_str() : nullptr;
  c.option_count = keys.size();
  c.option_keys = keys.data();
  c.option_values = values.data();
  const ballast_backend* backend = nullptr;
  ErrorSlot e;
  if (Status s = e.status(table_.open(table_.ctx, &c, &backend, &e.c)); !s) {
    DestroyOnRefusal guard{backend};  // a table returned with an error is still the plugin's to destroy
    return s;
  }
  // Success with no table breaks the ABI (adopt_backend_table says so, as
  // abi_mismatch, so the registry names the plugin's file).
  return adopt_backend_table(backend);
}

void* PluginTable::extension(const char* name) const {
  return table_.get_proc_address != nullptr && name != nullptr ? table_.get_proc_address(table_.ctx, name) : nullptr;
}

}  // namespace ballast::detail

namespace ballast {

Result<std::unique_ptr<GpuBackend>> adopt_backend(const ballast_backend& table) {
  return detail::adopt_backend_table(&table);
}

}  // namespace ballast
