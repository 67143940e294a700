// The plugin SDK for backends written in C++ (installed as the CMake
// component ballast::plugin_sdk; docs/plugins.md). Backend authors and
// engines that bring their own backend include it; engines that only open
// backends never need it.
//
// What crosses a plugin library's boundary is plain C: the tables of
// plugin_api.h, versioned by (major, minor) and read only up to the size
// their writer gave them. This header is an adapter compiled INTO the
// plugin: BALLAST_PLUGIN_ENTRY turns a C++ BackendPlugin, whose open()
// returns a BackendDevice, into those tables, so a backend is written in
// C++ while no C++ object, exception or standard-library type ever
// crosses. The core wraps the tables in a GpuBackend, whose public methods
// check every call before the backend sees it.
//
// A backend reaches the registry one of two ways:
//  - as a plugin library, libballast-<name>.so in a plugin search folder,
//    exporting one C function, ballast_plugin_entry, written by
//    BALLAST_PLUGIN_ENTRY below (or by hand, in C: plugin_api.h);
//  - linked into the program (the built-in CPU backend, an engine's own
//    backend), handed over with register_backend(), through the same tables.
// Backend code must never let an exception escape: the adapter catches
// any that does and reports it as an error value.
#pragma once

#include <ballast/backend_registry.hpp>
#include <ballast/export.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/plugin_api.h>

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

// The minor version this plugin's tables declare: the header's own unless
// a build asks for an older one (ballast's tests build a plugin as ABI 1.0
// this way: its tables then end before 1.1's get_proc_address fields).
#ifndef BALLAST_PLUGIN_API_TARGET_MINOR
#define BALLAST_PLUGIN_API_TARGET_MINOR BALLAST_PLUGIN_API_MINOR
#endif

BALLAST_API_BEGIN

namespace ballast {

// Makes the plugin `table` the backend called `name` for open_backend,
// list_backends and `ballast backends`, for a backend linked into the
// program rather than loaded from a plugin file. The table is checked as a
// plugin file's is (its ABI major, its name, which must be `name`). The
// registry keeps `table` (and what its ctx points at) for the life of the
// process; it is never destroyed by ballast. A registered name is never
// looked up as a file. Thread-safe; may be called during static
// initialisation.
// Errors:
//   invalid_argument: `name` is not a lowercase identifier [a-z][a-z0-9_]*;
//   abi_mismatch:     the table's ABI major is not the core's, or it is malformed;
//   unsupported:      the name is taken, by a registered backend or by a
//                     plugin file of that name already loaded (a name has
//                     one backend per process).
Status register_backend(std::string name, const ballast_plugin& table);

// The GpuBackend over an opened backend table (what a plugin's open()
// returns), which it owns from then on: for engines and tests holding a
// backend of their own. abi_mismatch when the table is malformed.
Result<std::unique_ptr<GpuBackend>> adopt_backend(const ballast_backend& table);

}  // namespace ballast

BALLAST_API_END

// Everything below is compiled into each binary that includes it and kept
// hidden there, so a plugin's adapter never binds to another copy (the
// core's, built by another compiler) at load time.
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

namespace ballast {

// One opened device, as a backend implements it. The same methods as
// GpuBackend's private do_* (gpu_backend.hpp says what each receives):
// arguments arrive checked by the core, each operand resolved to the
// allocation or registration holding it and that range's cookie. Called
// from several threads at once. When the core destroys it, nothing is
// live any more: the core has freed and unregistered what the caller leaked.
class BackendDevice {
 public:
  virtual ~BackendDevice() = default;
  virtual const DeviceInfo& do_info() const = 0;          // stable for the device's life
  virtual const Capabilities& do_capabilities() const = 0;  // likewise
  virtual Result<BackendRange> do_allocate(std::uint64_t bytes, std::uint64_t alignment) = 0;
  virtual Status do_free(const BackendRange& allocation, std::uint64_t bytes) = 0;
  virtual Status do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) = 0;
  virtual Status do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) = 0;
  virtual Status do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) = 0;
  virtual Result<BackendRange> do_register_host(const void* host, std::uint64_t bytes, HostAccess access) = 0;
  virtual Status do_unregister_host(const BackendRange& registration, std::uint64_t bytes, HostAccess access) = 0;
  virtual Status do_launch(const DerivationLaunch& launch, const DerivationSizes& sizes,
                           const LaunchOperands& operands) = 0;
  virtual Status do_synchronize() = 0;
  // GpuBackend::extension(name): null for none.
  virtual void* do_extension(const char* /*name*/) { return nullptr; }
};

// What a plugin implements.
class BackendPlugin {
 public:
  virtual ~BackendPlugin() = default;
  // Devices this plugin can open; `unavailable` with the reason when there
  // is no driver or no device.
  virtual Result<std::vector<DeviceInfo>> devices() = 0;
  // Opens the device chosen by `config` (index, uuid, options). Unknown
  // option keys are invalid_argument errors naming the known keys.
  virtual Result<std::unique_ptr<BackendDevice>> open(const BackendConfig& config) = 0;
  // The plugin table's get_proc_address (ABI 1.1): null for none.
  virtual void* extension(const char* /*name*/) { return nullptr; }
};

// register_backend's C++ form: `plugin` through this header's adapter. It must outlive
// every use (a function-local static or a leaked object).
inline Status register_backend(std::string name, BackendPlugin& plugin);

}  // namespace ballast

namespace ballast::plugin_detail {

// The backend-name rule: a lowercase identifier, [a-z][a-z0-9_]*.
constexpr bool is_backend_name(std::string_view name) noexcept {
  if (name.empty() || name.front() < 'a' || name.front() > 'z') return false;
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// BALLAST_PLUGIN_ENTRY's factory: a pointer to the plugin, or something
// callable with no arguments that returns one.
inline BackendPlugin* plugin_from(BackendPlugin* plugin) noexcept { return plugin; }
template <class Factory>
  requires std::is_invocable_r_v<BackendPlugin*, Factory&>
BackendPlugin* plugin_from(Factory&& factory) {
  return factory();
}

// What the tables declare: with a target minor of 0, they end where 1.1
// appended get_proc_address; with 1, where 1.2 appended kind_count.
constexpr std::size_t kPluginTableSize =
    BALLAST_PLUGIN_API_TARGET_MINOR >= 1 ? sizeof(ballast_plugin) : offsetof(ballast_plugin, get_proc_address);
constexpr std::size_t kBackendTableSize = BALLAST_PLUGIN_API_TARGET_MINOR >= 2   ? sizeof(ballast_backend)
                                          : BALLAST_PLUGIN_API_TARGET_MINOR >= 1 ? offsetof(ballast_backend, kind_count)
                                                                                 : offsetof(ballast_backend, get_proc_address);

// "<context>: <message>": an Error's text without libballast's to_string,
// so the adapter needs nothing of the core's binary.
inline std::string error_text(const Error& e) {
  return e.context.empty() ? e.message : e.context + ": " + e.message;
}

inline int32_t report(ballast_error* out, const Error& e) {
  const int32_t code = e.code == ErrorCode::ok ? BALLAST_INTERNAL : static_cast<int32_t>(e.code);
  try {
    const std::string text = error_text(e);
    out->set(out, code, text.c_str(), e.native.empty() ? nullptr : e.native.c_str());
  } catch (...) {
    out->set(out, code, "(no memory for the error message)", nullptr);
  }
  return code;
}

// Runs `body` (returning Status), reporting its error, or an exception
// that escaped it, through `out`: nothing C++ leaves the plugin.
template <class Body>
int32_t guarded(ballast_error* out, Body&& body) noexcept {
  try {
    Status s = body();
    return s.ok() ? BALLAST_OK : report(out, s.error());
  } catch (const std::bad_alloc&) {
    out->set(out, BALLAST_OUT_OF_MEMORY, "out of host memory (std::bad_alloc in the plugin)", nullptr);
    return BALLAST_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    out->set(out, BALLAST_INTERNAL, (std::string("plugin threw an exception: ") + e.what()).c_str(), nullptr);
    return BALLAST_INTERNAL;
  } catch (...) {
    out->set(out, BALLAST_INTERNAL, "plugin threw an exception", nullptr);
    return BALLAST_INTERNAL;
  }
}

inline ResolvedOperand operand(const ballast_operand& o) { return {o.ptr, o.cookie, o.offset}; }

// One opened device behind a ballast_backend table; ctx points here.
struct DeviceBox {
  std::unique_ptr<BackendDevice> device;
  ballast_backend table{};
  ballast_device_info info{};
  ballast_capabilities caps{};

  static BackendDevice& of(void* ctx) { return *static_cast<DeviceBox*>(ctx)->device; }

  static void destroy(void* ctx) noexcept { delete static_cast<DeviceBox*>(ctx); }
  static int32_t allocate(void* ctx, uint64_t bytes, uint64_t alignment, uint64_t* ptr, uint64_t* cookie,
                          ballast_error* e) noexcept {
    return guarded(e, [&]() -> Status {
      auto r = of(ctx).do_allocate(bytes, alignment);
      if (!r) return std::move(r.error());
      *ptr = r->ptr;
      *cookie = r->cookie;
      return {};
    });
  }
  static int32_t free(void* ctx, uint64_t ptr, uint64_t cookie, uint64_t bytes, ballast_error* e) noexcept {
    return guarded(e, [&] { return of(ctx).do_free({ptr, cookie}, bytes); });
  }
  static int32_t copy_to_device(void* ctx, const ballast_operand* dst, const void* src, uint64_t bytes,
                                ballast_error* e) noexcept {
    return guarded(e, [&] {
      return of(ctx).do_copy_to_device(operand(*dst), {static_cast<const std::byte*>(src), static_cast<std::size_t>(bytes)});
    });
  }
  static int32_t copy_to_host(void* ctx, void* dst, const ballast_operand* src, uint64_t bytes, ballast_error* e) noexcept {
    return guarded(e, [&] {
      return of(ctx).do_copy_to_host({static_cast<std::byte*>(dst), static_cast<std::size_t>(bytes)}, operand(*src));
    });
  }
  static int32_t copy_device(void* ctx, const ballast_operand* dst, const ballast_operand* src, uint64_t bytes,
                             ballast_error* e) noexcept {
    return guarded(e, [&] { return of(ctx).do_copy_device(operand(*dst), operand(*src), bytes); });
  }
  static int32_t register_host(void* ctx, const void* host, uint64_t bytes, int32_t access, uint64_t* ptr,
                               uint64_t* cookie, ballast_error* e) noexcept {
    return guarded(e, [&]() -> Status {
      auto r = of(ctx).do_register_host(host, bytes, static_cast<HostAccess>(access));
      if (!r) return std::move(r.error());
      *ptr = r->ptr;
      *cookie = r->cookie;
      return {};
    });
  }
  static int32_t unregister_host(void* ctx, uint64_t ptr, uint64_t cookie, uint64_t bytes, int32_t access,
                                 ballast_error* e) noexcept {
    return guarded(e, [&] { return of(ctx).do_unregister_host({ptr, cookie}, bytes, static_cast<HostAccess>(access)); });
  }
  static int32_t launch(void* ctx, const ballast_launch* c, ballast_error* e) noexcept {
    return guarded(e, [&]() -> Status {
      // The core sends only kinds below kind_count; a core that did not
      // (or a 1.0/1.1 table, which has no kind_count) is told, not obeyed.
      if (c->kind < 0 || !is_known_derivation(static_cast<std::uint64_t>(c->kind)))
        return Status(make_error(ErrorCode::unsupported, "derivation kind " + std::to_string(c->kind) +
                                                             " is newer than this plugin: rebuild it"));
      DerivationLaunch l;
      l.kind = static_cast<Derivation>(c->kind);
      l.src_type = static_cast<DataType>(c->src_type);
      l.zero_points = static_cast<ZeroPoints>(c->zero_points);
      l.block_size = c->block_size;
      l.rows = c->rows;
      l.cols = c->cols;
      l.src = c->src.ptr;
      l.scales = c->scales.ptr;
      l.zero_point = c->zero_point.ptr;
      l.dst = c->dst.ptr;
      l.dst2 = c->dst2.ptr;
      if (BALLAST_HAS_FIELD(ballast_launch, c, col_offset)) {
        l.src_cols = c->src_cols;
        l.col_offset = c->col_offset;
      }
      const DerivationSizes sizes{c->src.bytes, c->scales.bytes, c->zero_point.bytes, c->dst.bytes, c->dst2.bytes};
      const LaunchOperands ops{operand(c->src), operand(c->scales), operand(c->zero_point), operand(c->dst),
                               operand(c->dst2)};
      return of(ctx).do_launch(l, sizes, ops);
    });
  }
  static int32_t synchronize(void* ctx, ballast_error* e) noexcept {
    return guarded(e, [&] { return of(ctx).do_synchronize(); });
  }
  static void* get_proc_address(void* ctx, const char* name) noexcept {
    try {
      return of(ctx).do_extension(name);
    } catch (...) {
      return nullptr;
    }
  }

  // The table over `device` (which the box then owns).
  static DeviceBox* make(std::unique_ptr<BackendDevice> device) {
    auto box = std::make_unique<DeviceBox>();
    const DeviceInfo& i = device->do_info();
    box->info = {sizeof(ballast_device_info), i.backend.c_str(), i.index, i.name.c_str(), i.uuid.c_str(),
                 i.driver.c_str(), i.memory_bytes};
    const Capabilities& c = device->do_capabilities();
    box->caps.struct_size = sizeof(ballast_capabilities);
    box->caps.host_registration = c.host_registration;
    box->caps.read_only_registration = c.read_only_registration;
    box->caps.flushes_f16_subnormals = c.flushes_f16_subnormals;
    box->caps.int8_codes_within_one = c.int8_codes_within_one;
    box->caps.unaligned_operands = c.unaligned_operands;
    box->caps.guarded_host_reads = c.guarded_host_reads;
    box->caps.import_alignment = c.import_alignment;
    box->caps.max_single_allocation = c.max_single_allocation;
    box->caps.host_registration_note = c.host_registration_note.c_str();
    box->device = std::move(device);
    ballast_backend& t = box->table;
    t.struct_size = kBackendTableSize;
    t.ctx = box.get();
    t.info = &box->info;
    t.capabilities = &box->caps;
    t.destroy = &DeviceBox::destroy;
    t.allocate = &DeviceBox::allocate;
    t.free = &DeviceBox::free;
    t.copy_to_device = &DeviceBox::copy_to_device;
    t.copy_to_host = &DeviceBox::copy_to_host;
    t.copy_device = &DeviceBox::copy_device;
    t.register_host = &DeviceBox::register_host;
    t.unregister_host = &DeviceBox::unregister_host;
    t.launch = &DeviceBox::launch;
    t.synchronize = &DeviceBox::synchronize;
    if constexpr (BALLAST_PLUGIN_API_TARGET_MINOR >= 1) t.get_proc_address = &DeviceBox::get_proc_address;
    if constexpr (BALLAST_PLUGIN_API_TARGET_MINOR >= 2) t.kind_count = static_cast<uint32_t>(kDerivationCount);
    return box.release();
  }
};

// A BackendPlugin behind a ballast_plugin table; ctx points here. The
// plugin is made on first use (a plugin file's factory runs when the
// registry first lists or opens it, not when the file is checked).
struct PluginBox {
  BackendPlugin* (*factory)() = nullptr;
  BackendPlugin* plugin = nullptr;
  std::once_flag once;
  ballast_plugin table{};
  std::string name;  // register_backend's copy of the name (table.name points into it)

  static Result<BackendPlugin*> of(void* ctx) {
    auto* box = static_cast<PluginBox*>(ctx);
    std::call_once(box->once, [box] {
      if (box->plugin == nullptr && box->factory != nullptr) box->plugin = box->factory();
    });
    if (box->plugin == nullptr)
      return make_error(ErrorCode::internal, "the plugin's factory threw an exception or returned null");
    return box->plugin;
  }

  static int32_t devices(void* ctx, void (*emit)(void*, const ballast_device_info*), void* user,
                         ballast_error* e) noexcept {
    return guarded(e, [&]() -> Status {
      auto p = of(ctx);
      if (!p) return std::move(p.error());
      auto list = (*p)->devices();
      if (!list) return std::move(list.error());
      for (const DeviceInfo& d : *list) {
        const ballast_device_info c{sizeof(ballast_device_info), d.backend.c_str(), d.index, d.name.c_str(),
                                    d.uuid.c_str(), d.driver.c_str(), d.memory_bytes};
        emit(user, &c);
      }
      return {};
    });
  }

  static int32_t open(void* ctx, const ballast_backend_config* c, const ballast_backend** out, ballast_error* e) noexcept {
    *out = nullptr;
    return guarded(e, [&]() -> Status {
      auto p = of(ctx);
      if (!p) return std::move(p.error());
      BackendConfig config;
      config.text = c->text != nullptr ? c->text : "";
      config.name = c->name != nullptr ? c->name : "";
      if (c->has_device_index) config.device_index = c->device_index;
      if (c->device_uuid != nullptr) config.device_uuid = std::string(c->device_uuid);
      for (std::size_t i = 0; i < c->option_count; ++i) config.options.emplace(c->option_keys[i], c->option_values[i]);
      auto device = (*p)->open(config);
      if (!device) return std::move(device.error());
      if (*device == nullptr) return make_error(ErrorCode::internal, "plugin open() returned null");
      *out = &DeviceBox::make(std::move(*device))->table;
      return {};
    });
  }

  static void* get_proc_address(void* ctx, const char* name) noexcept {
    try {
      auto p = of(ctx);
      return p ? (*p)->extension(name) : nullptr;
    } catch (...) {
      return nullptr;
    }
  }

  // A table named `name` over `plugin`, or over what `factory` makes.
  // Never freed: the registry keeps a plugin for the life of the process.
  static const ballast_plugin* make(const char* name, BackendPlugin* made, BackendPlugin* (*make_plugin)()) {
    auto* box = new (std::nothrow) PluginBox;
    if (box == nullptr) return nullptr;
    box->plugin = made;
    box->factory = make_plugin;
    ballast_plugin& t = box->table;
    t.struct_size = kPluginTableSize;
    t.api_major = BALLAST_PLUGIN_API_MAJOR;
    t.api_minor = BALLAST_PLUGIN_API_TARGET_MINOR;
    t.name = name;
    t.ctx = box;
    t.devices = &PluginBox::devices;
    t.open = &PluginBox::open;
    if constexpr (BALLAST_PLUGIN_API_TARGET_MINOR >= 1) t.get_proc_address = &PluginBox::get_proc_address;
    return &t;
  }
};

// A BackendDevice over a GpuBackend the plugin opened through the public
// API (another backend under this plugin's name, as the loopback example
// does): the cookie is the inner backend's own pointer.
class ForwardingDevice final : public BackendDevice {
 public:
  explicit ForwardingDevice(std::unique_ptr<GpuBackend> inner) : inner_(std::move(inner)) {}
  const DeviceInfo& do_info() const override { return inner_->info(); }
  const Capabilities& do_capabilities() const override { return inner_->capabilities(); }
  Result<BackendRange> do_allocate(std::uint64_t bytes, std::uint64_t alignment) override {
    auto p = inner_->allocate(bytes, alignment);
    if (!p) return std::move(p.error());
    return BackendRange{*p, *p};
  }
  Status do_free(const BackendRange& a, std::uint64_t) override { return inner_->free(a.ptr); }
  Status do_copy_to_device(const ResolvedOperand& dst, std::span<const std::byte> src) override {
    return inner_->copy_to_device(dst.ptr, 0, src);
  }
  Status do_copy_to_host(std::span<std::byte> dst, const ResolvedOperand& src) override {
    return inner_->copy_to_host(dst, src.ptr, 0);
  }
  Status do_copy_device(const ResolvedOperand& dst, const ResolvedOperand& src, std::uint64_t bytes) override {
    return inner_->copy_device(dst.ptr, 0, src.ptr, 0, bytes);
  }
  Result<BackendRange> do_register_host(const void* host, std::uint64_t bytes, HostAccess access) override {
    auto p = inner_->register_host(host, bytes, access);
    if (!p) return std::move(p.error());
    return BackendRange{*p, *p};
  }
  // By size and access too: the inner backend may hold another registration
  // from the same start (registrations may overlap).
  Status do_unregister_host(const BackendRange& r, std::uint64_t bytes, HostAccess access) override {
    return inner_->unregister_host(r.ptr, bytes, access);
  }
  Status do_launch(const DerivationLaunch& l, const DerivationSizes&, const LaunchOperands&) override {
    return inner_->launch(l);
  }
  Status do_synchronize() override { return inner_->synchronize(); }
  void* do_extension(const char* name) override { return inner_->extension(name); }

 private:
  std::unique_ptr<GpuBackend> inner_;
};

}  // namespace ballast::plugin_detail

namespace ballast {

inline Status register_backend(std::string name, BackendPlugin& plugin) {
  // The table keeps a pointer to the name: a copy held by the box, which
  // is the table's ctx. The registry keeps the table, so the box and the
  // copy stay reachable for the process (a copy held on its own, reached
  // only through its characters, read as a leak to LeakSanitizer once the
  // name outgrew the short-string buffer); a refusal deletes both.
  const ballast_plugin* table = plugin_detail::PluginBox::make("", &plugin, nullptr);
  if (table == nullptr) return make_error(ErrorCode::out_of_memory, "no host memory to register backend " + name);
  auto* box = static_cast<plugin_detail::PluginBox*>(table->ctx);
  try {
    box->name = name;
  } catch (const std::bad_alloc&) {
    delete box;
    return make_error(ErrorCode::out_of_memory, "no host memory to register backend");
  }
  box->table.name = box->name.c_str();
  Status registered = register_backend(std::move(name), *table);
  if (!registered.ok()) delete box;
  return registered;
}

// The device a plugin's open() returns for a backend it opened through
// the public API (see ForwardingDevice).
inline Result<std::unique_ptr<BackendDevice>> forward_device(Result<std::unique_ptr<GpuBackend>> opened) {
  if (!opened) return std::move(opened.error());
  return std::unique_ptr<BackendDevice>(std::make_unique<plugin_detail::ForwardingDevice>(std::move(*opened)));
}

// A device of the program's own as a GpuBackend (through the same tables a
// plugin's are), for tests and engines that open a BackendDevice directly.
inline Result<std::unique_ptr<GpuBackend>> adopt_device(std::unique_ptr<BackendDevice> device) {
  if (device == nullptr) return make_error(ErrorCode::invalid_argument, "adopt_device: no device");
  plugin_detail::DeviceBox* box = plugin_detail::DeviceBox::make(std::move(device));
  return adopt_backend(box->table);
}

}  // namespace ballast

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BALLAST_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define BALLAST_PLUGIN_EXPORT
#endif

// The entry point of a plugin library, written once in one of its .cpp
// files (at namespace scope):
//
//   BALLAST_PLUGIN_ENTRY("mybackend", new my::Plugin())
//   BALLAST_PLUGIN_ENTRY("mybackend", &my::create_plugin)
//
// `name` is a string literal, the backend's name (a lowercase identifier,
// checked at compile time), which must match the library's file name
// libballast-<name>.so. `factory` is an expression giving a
// ballast::BackendPlugin* (evaluated once, when the registry first lists
// or opens the backend), or a function/lambda returning one. An exception
// from it, or null, makes devices() and open() fail with `internal`.
// Expands to the exported `extern "C"` ballast_plugin_entry() returning the
// plugin table (plugin_api.h) of this header's ABI version. (The factory is
// the rest of the arguments, so a comma inside it, as in
// new my::Plugin<A, B>(), needs no extra parentheses.)
#define BALLAST_PLUGIN_ENTRY(name, ...)                                                                     \
  static_assert(::ballast::plugin_detail::is_backend_name(name),                                          \
                "BALLAST_PLUGIN_ENTRY: the backend name must be a lowercase identifier [a-z][a-z0-9_]*"); \
  extern "C" BALLAST_PLUGIN_EXPORT const ::ballast_plugin* ballast_plugin_entry() {                        \
    static const ::ballast_plugin* const ballast_plugin_table_ = ::ballast::plugin_detail::PluginBox::make( \
        name, nullptr, []() noexcept -> ::ballast::BackendPlugin* {                                        \
          try {                                                                                            \
            return ::ballast::plugin_detail::plugin_from(__VA_ARGS__);                                     \
          } catch (...) {                                                                                  \
            return nullptr;                                                                                \
          }                                                                                                \
        });                                                                                                \
    return ballast_plugin_table_;                                                                          \
  }                                                                                                        \
  static_assert(true, "")
