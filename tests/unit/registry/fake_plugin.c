/* A stand-in plugin library written in plain C99 against plugin_api.h
 * alone (no SDK, no C++), built several times with different tables and
 * behaviours (see CMakeLists.txt) so the registry's checks and error paths
 * can be exercised without any GPU.
 *   FAKE_NAME             the table's name
 *   FAKE_API_MAJOR/MINOR  the versions it declares (default: the header's)
 *   FAKE_TABLE_SIZE       its struct_size (default: sizeof(ballast_plugin))
 *   FAKE_BEHAVIOUR        0 working, 1 unavailable, 2 an error without a message,
 *                         3 open() returns a table without allocate, 4 devices()
 *                         reports a null device, 5 it reports device 1 with index 5,
 *                         6 open() reports success and returns no table,
 *                         7 allocate() works (from a static arena) and free() always fails,
 *                         8 allocate() "succeeds" with a null pointer; host registration works,
 *                         9 devices() reports device 1 in a struct_size of 0
 * Every kind answers the plugin-wide extension "fake_plugin_wide" (with
 * its table's name, so a caller can tell whose it reached).
 * The working fake lists two devices and opens a backend that refuses
 * every operation. */
#include <ballast/plugin_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FAKE_API_MAJOR
#define FAKE_API_MAJOR BALLAST_PLUGIN_API_MAJOR
#endif
#ifndef FAKE_API_MINOR
#define FAKE_API_MINOR BALLAST_PLUGIN_API_MINOR
#endif
#ifndef FAKE_TABLE_SIZE
#define FAKE_TABLE_SIZE sizeof(ballast_plugin)
#endif

typedef struct fake_device {
  ballast_backend table;
  ballast_device_info info;
  ballast_capabilities caps;
  char name[32];
  char uuid[48];
} fake_device;

static void describe(int index, ballast_device_info* d, char* name, char* uuid) {
  snprintf(name, 32, "fake device %d", index);
  snprintf(uuid, 48, "GPU-0000000%d-aaaa-bbbb-cccc-0123456789AB", index);
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->backend = FAKE_NAME;
  d->index = index;
  d->name = name;
  d->uuid = uuid;
  d->driver = "";
  d->memory_bytes = ((uint64_t)1 << 30) * (uint64_t)(index + 1);
}

static int32_t refuse(ballast_error* e) {
  e->set(e, BALLAST_UNSUPPORTED, "fake backend", NULL);
  return BALLAST_UNSUPPORTED;
}

static void fake_destroy(void* ctx) { free(ctx); }
/* Behaviour 7's memory: handed out once each, never reused (nothing is
 * ever freed), so nothing leaks either. */
static unsigned char arena[1 << 16] __attribute__((aligned(4096)));
static size_t arena_used;

static int32_t fake_allocate(void* ctx, uint64_t b, uint64_t a, uint64_t* p, uint64_t* c, ballast_error* e) {
  (void)ctx;
  if (FAKE_BEHAVIOUR == 7 && a <= 4096) {
    const size_t start = (arena_used + (size_t)a - 1) / (size_t)a * (size_t)a;
    if (b <= sizeof arena - start) {
      arena_used = start + (size_t)b + 1; /* +1: a zero-byte one still owns its address */
      *p = (uint64_t)(uintptr_t)(arena + start);
      *c = 0;
      return BALLAST_OK;
    }
  }
  if (FAKE_BEHAVIOUR == 8) {
    *p = 0;
    *c = 0;
    return BALLAST_OK;
  }
  return refuse(e);
}
static int32_t fake_free(void* ctx, uint64_t p, uint64_t c, uint64_t b, ballast_error* e) {
  (void)ctx, (void)p, (void)c, (void)b;
  if (FAKE_BEHAVIOUR == 8) return BALLAST_OK; /* the core gives back the null it refused */
  if (FAKE_BEHAVIOUR == 7) {
    e->set(e, BALLAST_DEVICE_ERROR, "fake backend: free refused", "FAKE_FREE_FAILED");
    return BALLAST_DEVICE_ERROR;
  }
  return refuse(e);
}
static int32_t fake_copy_in(void* ctx, const ballast_operand* d, const void* s, uint64_t b, ballast_error* e) {
  (void)ctx, (void)d, (void)s, (void)b;
  return refuse(e);
}
static int32_t fake_copy_out(void* ctx, void* d, const ballast_operand* s, uint64_t b, ballast_error* e) {
  (void)ctx, (void)d, (void)s, (void)b;
  return refuse(e);
}
static int32_t fake_copy(void* ctx, const ballast_operand* d, const ballast_operand* s, uint64_t b, ballast_error* e) {
  (void)ctx, (void)d, (void)s, (void)b;
  return refuse(e);
}
static int32_t fake_register(void* ctx, const void* h, uint64_t b, int32_t a, uint64_t* p, uint64_t* c,
                             ballast_error* e) {
  (void)ctx, (void)b, (void)a;
  if (FAKE_BEHAVIOUR == 8) {
    *p = (uint64_t)(uintptr_t)h;
    *c = 0;
    return BALLAST_OK;
  }
  return refuse(e);
}
static int32_t fake_unregister(void* ctx, uint64_t p, uint64_t c, uint64_t b, int32_t a, ballast_error* e) {
  (void)ctx, (void)p, (void)c, (void)b, (void)a;
  if (FAKE_BEHAVIOUR == 8) return BALLAST_OK;
  return refuse(e);
}
static int32_t fake_launch(void* ctx, const ballast_launch* l, ballast_error* e) {
  (void)ctx, (void)l;
  return refuse(e);
}
static int32_t fake_synchronize(void* ctx, ballast_error* e) {
  (void)ctx, (void)e;
  return BALLAST_OK;
}

static int32_t fake_devices(void* ctx, void (*emit)(void*, const ballast_device_info*), void* user, ballast_error* e) {
  (void)ctx;
  if (FAKE_BEHAVIOUR == 1) {
    e->set(e, BALLAST_UNAVAILABLE, "no fake physical device (test plugin)", NULL);
    return BALLAST_UNAVAILABLE;
  }
  if (FAKE_BEHAVIOUR == 2) return BALLAST_INTERNAL; /* and says nothing */
  for (int i = 0; i < 2; ++i) {
    ballast_device_info d;
    char name[32], uuid[48];
    describe(i, &d, name, uuid);
    if (FAKE_BEHAVIOUR == 5 && i == 1) d.index = 5;
    if (FAKE_BEHAVIOUR == 9 && i == 1) d.struct_size = 0;
    emit(user, FAKE_BEHAVIOUR == 4 && i == 1 ? NULL : &d);
  }
  return BALLAST_OK;
}

static int32_t fake_open(void* ctx, const ballast_backend_config* config, const ballast_backend** out,
                         ballast_error* e) {
  (void)ctx;
  if (FAKE_BEHAVIOUR == 6) return BALLAST_OK; /* and *out stays NULL */
  if (config->option_count > 0 && strcmp(config->option_keys[0], "validation") != 0) {
    char message[128];
    snprintf(message, sizeof message, "unknown option \"%s\"; known: validation", config->option_keys[0]);
    e->set(e, BALLAST_INVALID_ARGUMENT, message, NULL);
    return BALLAST_INVALID_ARGUMENT;
  }
  int index = config->has_device_index ? config->device_index : 0;
  if (config->device_uuid != NULL) index = strstr(config->device_uuid, "00000001") != NULL ? 1 : 0;
  fake_device* d = calloc(1, sizeof *d);
  if (d == NULL) {
    e->set(e, BALLAST_OUT_OF_MEMORY, "fake backend: no memory", NULL);
    return BALLAST_OUT_OF_MEMORY;
  }
  describe(index, &d->info, d->name, d->uuid);
  d->caps.struct_size = sizeof d->caps;
  d->caps.host_registration_note = "fake backend: uploads only";
  d->caps.max_single_allocation = 1 << 20;
  d->caps.import_alignment = 1;
  d->caps.guarded_host_reads = 1;
  if (FAKE_BEHAVIOUR == 8) {
    d->caps.host_registration = 1;
    d->caps.read_only_registration = 1;
  }
  ballast_backend* t = &d->table;
  t->struct_size = sizeof *t;
  t->ctx = d;
  t->info = &d->info;
  t->capabilities = &d->caps;
  t->destroy = fake_destroy;
  t->allocate = fake_allocate;
  t->free = fake_free;
  t->copy_to_device = fake_copy_in;
  t->copy_to_host = fake_copy_out;
  t->copy_device = fake_copy;
  t->register_host = fake_register;
  t->unregister_host = fake_unregister;
  t->launch = fake_launch;
  t->synchronize = fake_synchronize;
  t->get_proc_address = NULL;
  t->kind_count = 10; /* transpose to slice: the kinds of ABI 1.2 */
  if (FAKE_BEHAVIOUR == 3) t->allocate = NULL;
  *out = t;
  return BALLAST_OK;
}

static void* fake_plugin_proc(void* ctx, const char* name) {
  (void)ctx;
  static const char* const whose = FAKE_NAME;
  return strcmp(name, "fake_plugin_wide") == 0 ? (void*)&whose : NULL;
}

__attribute__((visibility("default"))) const ballast_plugin* ballast_plugin_entry(void) {
  static ballast_plugin table;
  table.struct_size = FAKE_TABLE_SIZE;
  table.api_major = FAKE_API_MAJOR;
  table.api_minor = FAKE_API_MINOR;
  table.name = FAKE_NAME;
  table.ctx = NULL;
  table.devices = fake_devices;
  table.open = fake_open;
  table.get_proc_address = fake_plugin_proc;
  return &table;
}
