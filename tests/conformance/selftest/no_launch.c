/* A backend whose every launch fails (host memory, copies that work,
 * launch refused as unsupported): the conformance suite run on it must
 * report those failures and nothing else; in particular no leak of the
 * suite's own allocations and no "unknown exception" in place of the
 * backend's error (ctest conformance.selftest.no_launch). Plain C against
 * plugin_api.h, as a vendor's plugin may be. */
#include <ballast/plugin_api.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static ballast_device_info info = {sizeof(ballast_device_info),
                                   "no_launch",
                                   0,
                                   "no_launch test device",
                                   "GPU-00000000-0000-0000-0000-00000000001a",
                                   "no_launch 1",
                                   1ull << 30};
static ballast_capabilities caps = {
    sizeof(ballast_capabilities), 0, 0, 0, 0, 0, 0, 1, 1ull << 30, "no_launch: a test backend without registration"};

static void destroy(void* ctx) { (void)ctx; }
static int32_t allocate(void* ctx, uint64_t bytes, uint64_t alignment, uint64_t* ptr, uint64_t* cookie,
                        ballast_error* e) {
  (void)ctx;
  if (bytes > caps.max_single_allocation) {
    e->set(e, BALLAST_OUT_OF_MEMORY, "larger than max_single_allocation", NULL);
    return BALLAST_OUT_OF_MEMORY;
  }
  const uint64_t a = alignment < 64 ? 64 : alignment;
  const uint64_t n = bytes == 0 ? a : (bytes + a - 1) / a * a;
  void* p = aligned_alloc((size_t)a, (size_t)n);
  if (p == NULL) {
    e->set(e, BALLAST_OUT_OF_MEMORY, "aligned_alloc failed", NULL);
    return BALLAST_OUT_OF_MEMORY;
  }
  *ptr = (uint64_t)(uintptr_t)p;
  *cookie = 0;
  return BALLAST_OK;
}
static int32_t release(void* ctx, uint64_t ptr, uint64_t cookie, uint64_t bytes, ballast_error* e) {
  (void)ctx, (void)cookie, (void)bytes, (void)e;
  free((void*)(uintptr_t)ptr);
  return BALLAST_OK;
}
static int32_t to_device(void* ctx, const ballast_operand* dst, const void* src, uint64_t bytes, ballast_error* e) {
  (void)ctx, (void)e;
  memcpy((void*)(uintptr_t)dst->ptr, src, (size_t)bytes);
  return BALLAST_OK;
}
static int32_t to_host(void* ctx, void* dst, const ballast_operand* src, uint64_t bytes, ballast_error* e) {
  (void)ctx, (void)e;
  memcpy(dst, (const void*)(uintptr_t)src->ptr, (size_t)bytes);
  return BALLAST_OK;
}
static int32_t on_device(void* ctx, const ballast_operand* dst, const ballast_operand* src, uint64_t bytes,
                         ballast_error* e) {
  (void)ctx, (void)e;
  memcpy((void*)(uintptr_t)dst->ptr, (const void*)(uintptr_t)src->ptr, (size_t)bytes);
  return BALLAST_OK;
}
static int32_t register_host(void* ctx, const void* host, uint64_t bytes, int32_t access, uint64_t* ptr,
                             uint64_t* cookie, ballast_error* e) {
  (void)ctx, (void)host, (void)bytes, (void)access, (void)ptr, (void)cookie;
  e->set(e, BALLAST_UNSUPPORTED, "no_launch: no registration", NULL);
  return BALLAST_UNSUPPORTED;
}
static int32_t unregister_host(void* ctx, uint64_t ptr, uint64_t cookie, uint64_t bytes, int32_t access,
                               ballast_error* e) {
  (void)ctx, (void)ptr, (void)cookie, (void)bytes, (void)access;
  e->set(e, BALLAST_UNSUPPORTED, "no_launch: no registration", NULL);
  return BALLAST_UNSUPPORTED;
}
static int32_t launch(void* ctx, const ballast_launch* l, ballast_error* e) {
  (void)ctx, (void)l;
  e->set(e, BALLAST_UNSUPPORTED, "no_launch: this test backend launches nothing", NULL);
  return BALLAST_UNSUPPORTED;
}
static int32_t synchronize(void* ctx, ballast_error* e) {
  (void)ctx, (void)e;
  return BALLAST_OK;
}

static const ballast_backend backend = {sizeof(ballast_backend),
                                        NULL,
                                        &info,
                                        &caps,
                                        destroy,
                                        allocate,
                                        release,
                                        to_device,
                                        to_host,
                                        on_device,
                                        register_host,
                                        unregister_host,
                                        launch,
                                        synchronize,
                                        NULL,
                                        9};

static int32_t devices(void* ctx, void (*emit)(void*, const ballast_device_info*), void* user, ballast_error* e) {
  (void)ctx, (void)e;
  emit(user, &info);
  return BALLAST_OK;
}
static int32_t open_device(void* ctx, const ballast_backend_config* c, const ballast_backend** out, ballast_error* e) {
  (void)ctx, (void)c, (void)e;
  *out = &backend;
  return BALLAST_OK;
}

static const ballast_plugin plugin = {sizeof(ballast_plugin),
                                      BALLAST_PLUGIN_API_MAJOR,
                                      BALLAST_PLUGIN_API_MINOR,
                                      "no_launch",
                                      NULL,
                                      devices,
                                      open_device,
                                      NULL};

__attribute__((visibility("default"))) const ballast_plugin* ballast_plugin_entry(void) { return &plugin; }
