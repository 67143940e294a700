/* The ballast plugin ABI: the only thing that crosses a plugin library's
 * boundary (docs/plugins.md, "The plugin ABI"). Plain C99 (also valid C++),
 * so a plugin may be built by any compiler, against any standard library,
 * and against any ballast release of the same ABI major.
 *
 * A plugin library exports one C function, ballast_plugin_entry(), that
 * returns a ballast_plugin table. The core reads its frozen prefix
 * (struct_size, api_major, api_minor, name), refuses another major with
 * both versions named, and then only calls through function pointers.
 * Opening a device returns a ballast_backend table, which the core wraps
 * in a GpuBackend: the core validates every call (its record of live
 * ranges) before the plugin sees it, and hands the plugin back the
 * `cookie` the plugin chose for each allocation or registration, so a
 * plugin keeps no table of its own to find them.
 *
 * Versioning: a minor release only appends fields to the end of a table
 * or struct and says so below ("since 1.1"). Every struct starts with its
 * struct_size as the plugin (or the core, for what the core fills) saw it:
 * the reader reads only the fields that lie within it and treats the rest
 * as absent (a NULL function: not provided). So the core accepts a plugin
 * of any minor of its major, older or newer; a new major is a different
 * ABI and is refused.
 *
 * Every function returns 0 (BALLAST_OK) or an error code; on error it
 * first calls error->set(error, code, message, native) once, and the core
 * copies the strings. No function may let a C++ exception or a longjmp
 * leave it. */
#ifndef BALLAST_PLUGIN_API_H
#define BALLAST_PLUGIN_API_H

#include <stddef.h>
#include <stdint.h>

#define BALLAST_PLUGIN_API_MAJOR 1
#define BALLAST_PLUGIN_API_MINOR 2

/* The one symbol a plugin library exports. */
#define BALLAST_PLUGIN_ENTRY_SYMBOL "ballast_plugin_entry"

/* Whether `field` of the struct `*p` (which starts with struct_size) lies
 * within the size its writer gave it. */
#define BALLAST_HAS_FIELD(type, p, field) \
  ((p)->struct_size >= offsetof(type, field) + sizeof(((const type*)0)->field))

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: the values of ballast::ErrorCode (status.hpp), checked
 * against it at compile time in the core. */
enum {
  BALLAST_OK = 0,
  BALLAST_INVALID_ARGUMENT = 1,
  BALLAST_NOT_FOUND = 2,
  BALLAST_OUT_OF_BOUNDS = 4,
  BALLAST_OVERFLOW = 6,
  BALLAST_UNSUPPORTED = 8,
  BALLAST_IO = 9,
  BALLAST_UNAVAILABLE = 10,
  BALLAST_OUT_OF_MEMORY = 11,
  BALLAST_DEVICE_ERROR = 12,
  BALLAST_INTERNAL = 16
};

/* HostAccess. */
enum { BALLAST_HOST_READ_ONLY = 0, BALLAST_HOST_READ_WRITE = 1 };

/* Filled by the core; the plugin only calls set(). */
typedef struct ballast_error {
  size_t struct_size;
  /* Records the error the function is about to return. `message` and
   * `native` (the driver's own name for the error, or NULL) are copied. */
  void (*set)(struct ballast_error* self, int32_t code, const char* message, const char* native);
} ballast_error;

/* DeviceInfo. Strings are the plugin's, valid as long as the table that
 * holds them (devices(): for the call). */
typedef struct ballast_device_info {
  size_t struct_size;
  const char* backend;
  int32_t index;
  const char* name;
  const char* uuid;
  const char* driver;
  uint64_t memory_bytes;
} ballast_device_info;

/* Capabilities (gpu_backend.hpp says what each means). Flags are 0 or 1. */
typedef struct ballast_capabilities {
  size_t struct_size;
  uint8_t host_registration;
  uint8_t read_only_registration;
  uint8_t flushes_f16_subnormals;
  uint8_t int8_codes_within_one;
  uint8_t unaligned_operands;
  uint8_t guarded_host_reads;
  uint64_t import_alignment;
  uint64_t max_single_allocation;
  const char* host_registration_note;
} ballast_capabilities;

/* BackendConfig: `open`'s argument. Options in key order. */
typedef struct ballast_backend_config {
  size_t struct_size;
  const char* text;          /* the config string it was parsed from */
  const char* name;
  int32_t has_device_index;  /* ":1" given */
  int32_t device_index;
  const char* device_uuid;   /* ":GPU-..." given, else NULL */
  size_t option_count;
  const char* const* option_keys;
  const char* const* option_values;
} ballast_backend_config;

/* One operand as the core resolved it: `ptr` is the absolute device
 * address, `cookie` what the plugin returned for the allocation or
 * registration holding it, `offset` the distance of `ptr` from that
 * allocation's (registration's) pointer. `bytes` is its length (0: an
 * operand the launch does not use; then cookie and offset are 0). */
typedef struct ballast_operand {
  uint64_t ptr;
  uint64_t cookie;
  uint64_t offset;
  uint64_t bytes;
} ballast_operand;

/* DerivationLaunch with its sizes (derivation.hpp). kind, src_type and
 * zero_points are the values of ballast::Derivation, DataType and
 * ZeroPoints. The core sends only kinds below the backend's kind_count. */
typedef struct ballast_launch {
  size_t struct_size;
  int32_t kind;
  int32_t src_type;
  int32_t zero_points;
  uint32_t block_size;
  uint64_t rows;
  uint64_t cols;
  ballast_operand src;
  ballast_operand scales;
  ballast_operand zero_point;
  ballast_operand dst;
  ballast_operand dst2;
  /* Since 1.2: slice's source row length and first column, in elements. */
  uint64_t src_cols;
  uint64_t col_offset;
} ballast_launch;

/* An opened device. Owned by the plugin until the core calls destroy(ctx)
 * (after it has freed and unregistered everything still live). `info` and
 * `capabilities` stay valid and unchanged until then. Arguments arrive
 * validated (GpuBackend's checks): byte counts are non-zero, ranges lie
 * inside what allocate/register_host returned, and register_host is called
 * only for an access the capabilities allow. Calls may come from several
 * threads at once. */
typedef struct ballast_backend {
  size_t struct_size;
  void* ctx;
  const ballast_device_info* info;
  const ballast_capabilities* capabilities;
  void (*destroy)(void* ctx);
  /* `ptr` is the allocation's device address, `cookie` any value the
   * plugin wants back in every later call about it. */
  int32_t (*allocate)(void* ctx, uint64_t bytes, uint64_t alignment, uint64_t* ptr, uint64_t* cookie,
                      ballast_error* error);
  /* On error the allocation must stay usable (it stays live). */
  int32_t (*free)(void* ctx, uint64_t ptr, uint64_t cookie, uint64_t bytes, ballast_error* error);
  /* The host copies must have finished with the host memory when they
   * return (the core reuses its staging buffers at once); copy_device and
   * launch may run asynchronously, in call order, finished by synchronize. */
  int32_t (*copy_to_device)(void* ctx, const ballast_operand* dst, const void* src, uint64_t bytes,
                            ballast_error* error);
  int32_t (*copy_to_host)(void* ctx, void* dst, const ballast_operand* src, uint64_t bytes, ballast_error* error);
  int32_t (*copy_device)(void* ctx, const ballast_operand* dst, const ballast_operand* src, uint64_t bytes,
                         ballast_error* error);
  /* `ptr` is where the device reads `host` (pointing at `host` itself even
   * when the range was widened); `cookie` as for allocate. */
  int32_t (*register_host)(void* ctx, const void* host, uint64_t bytes, int32_t access, uint64_t* ptr,
                           uint64_t* cookie, ballast_error* error);
  int32_t (*unregister_host)(void* ctx, uint64_t ptr, uint64_t cookie, uint64_t bytes, int32_t access,
                             ballast_error* error);
  /* Called only when the launch writes at least one byte. */
  int32_t (*launch)(void* ctx, const ballast_launch* launch, ballast_error* error);
  int32_t (*synchronize)(void* ctx, ballast_error* error);
  /* Since 1.1, optional: a backend-specific extension by name (NULL: none).
   * What the pointer is, is the extension's own contract. */
  void* (*get_proc_address)(void* ctx, const char* name);
  /* Since 1.2: how many derivation kinds launch() knows (kDerivationCount
   * of the headers it was built with; kinds are only ever appended). The
   * core refuses a launch of a later kind as unsupported, naming it, so a
   * plugin built before a kind existed never sees it. A table without the
   * field knows the 9 kinds of ABI 1.1 (transpose to quant_int8_given_max). */
  uint32_t kind_count;
} ballast_backend;

/* What ballast_plugin_entry() returns: static data, never freed. The first
 * four fields are frozen for every major version, so a core can name the
 * version of any plugin it refuses. */
typedef struct ballast_plugin {
  size_t struct_size;
  uint32_t api_major;
  uint32_t api_minor;
  const char* name; /* the <name> of libballast-<name>.so */
  void* ctx;
  /* Calls emit once per device, index 0 first; `unavailable` (with the
   * reason) when there is no driver or no device. */
  int32_t (*devices)(void* ctx, void (*emit)(void* user, const ballast_device_info* device), void* user,
                     ballast_error* error);
  /* Opens the device `config` names (the core has checked that it exists).
   * Unknown option keys are invalid_argument errors naming the known keys. */
  int32_t (*open)(void* ctx, const ballast_backend_config* config, const ballast_backend** backend,
                  ballast_error* error);
  /* Since 1.1, optional: a plugin-wide extension by name (NULL: none). */
  void* (*get_proc_address)(void* ctx, const char* name);
} ballast_plugin;

typedef const ballast_plugin* (*ballast_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* BALLAST_PLUGIN_API_H */
