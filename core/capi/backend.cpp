// Backends by config string, their device and capabilities, and the
// counters an engine compares before and after a teardown.
#include "capi/objects.hpp"

using namespace ballast;
using namespace ballast::capi;

extern "C" {

ballast_status* ballast_backend_open(const char* config, ballast_backend** out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output handle")) return e;
    if (config == nullptr) return invalid_argument("invalid_argument: the backend config is NULL");
    auto opened = open_backend(config);
    if (!opened.ok()) return from_error(opened.error());
    auto object = std::make_shared<BackendObject>();
    object->backend = std::move(*opened);
    *out = static_cast<ballast_backend*>(insert_handle(Kind::backend, std::move(object)));
    return nullptr;
  });
}

ballast_status* ballast_backend_free(ballast_backend* backend) {
  if (backend == nullptr) return nullptr;
  return guarded([&]() -> ballast_status* {
    return remove_handle(backend, Kind::backend) ? nullptr : bad_handle(Kind::backend, backend);
  });
}

ballast_status* ballast_backend_info(const ballast_backend* backend, ballast_device_info* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto b = lookup<BackendObject>(backend, Kind::backend, &e);
    if (!b) return e;
    // info() and capabilities() are fixed when the backend opens: their
    // strings live as long as it.
    const DeviceInfo& d = b->backend->info();
    const Capabilities& c = b->backend->capabilities();
    ballast_device_info info{};
    info.backend = d.backend.c_str();
    info.index = d.index;
    info.name = d.name.c_str();
    info.uuid = d.uuid.c_str();
    info.driver = d.driver.c_str();
    info.memory_bytes = d.memory_bytes;
    info.host_registration = c.host_registration;
    info.read_only_registration = c.read_only_registration;
    info.unaligned_operands = c.unaligned_operands;
    info.guarded_host_reads = c.guarded_host_reads;
    info.import_alignment = c.import_alignment;
    info.max_single_allocation = c.max_single_allocation;
    // The CPU backend's DevicePtr is the host address of its allocation or
    // of the registered host range (backends/cpu/backend.cpp, host()).
    info.host_visible = d.backend == "cpu" ? 1 : 0;
    return write_out(info, out);
  });
}

ballast_status* ballast_backend_counters(const ballast_backend* backend, ballast_device_counters* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto b = lookup<BackendObject>(backend, Kind::backend, &e);
    if (!b) return e;
    const AllocationCounters c = b->backend->counters();
    ballast_device_counters counters{};
    counters.live_allocations = c.live_allocations;
    counters.live_bytes = c.live_bytes;
    counters.live_registrations = c.live_registrations;
    return write_out(counters, out);
  });
}

ballast_status* ballast_backend_extension(const ballast_backend* backend, const char* name, void** out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output pointer")) return e;
    ballast_status* e = nullptr;
    auto b = lookup<BackendObject>(backend, Kind::backend, &e);
    if (!b) return e;
    if (name == nullptr) return invalid_argument("invalid_argument: the extension name is NULL");
    *out = b->backend->extension(name);
    return nullptr;
  });
}

ballast_status* ballast_plugin_extension(const char* backend_name, const char* name, void** out) {
  return guarded([&]() -> ballast_status* {
    if (auto* e = null_out(out, "the output pointer")) return e;
    if (backend_name == nullptr) return invalid_argument("invalid_argument: the backend name is NULL");
    auto found = plugin_extension(backend_name, name);
    if (!found.ok()) return from_error(found.error());
    *out = *found;
    return nullptr;
  });
}

}  // extern "C"
