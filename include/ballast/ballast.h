/* ballast.h: the C API of libballast (C99; also valid C++). docs/c_api.md.
 *
 * Handles. Every object is an opaque handle: ballast_model, ballast_backend,
 * ballast_plan, ballast_residency, ballast_pin (a pinned weight or derived
 * value: the way to address a value on the device). A handle is a number
 * (slot + generation), never a pointer into the library: a handle used after
 * its free, freed twice, or passed as the wrong kind is refused with
 * BALLAST_E_INVALID_HANDLE, never dereferenced. Free handles in any order:
 * an object lives while something made from it does (a residency keeps its
 * model and backend, a pin its residency). *_free(NULL) is a no-op.
 *
 * Status. Every call returns ballast_status*: NULL is success. A non-NULL
 * status belongs to the caller, who frees it with ballast_status_free();
 * ballast_status_code() and ballast_status_message() read it (NULL reads as
 * BALLAST_OK, "ok"). Outputs are written only on success (but for the
 * teardown report of a release that ran and failed, for pins still live or
 * frees that failed: see ballast_residency_release).
 *
 * Structs. Every struct that crosses starts with `size`: the caller sets it
 * to sizeof (BALLAST_INIT). The library reads an input struct's fields only
 * up to `size` (the rest take their zero default) and writes an output
 * struct's fields only up to `size`, so a struct may grow at its end.
 * Strings a struct returns live as long as the handle they came from.
 *
 * Versions. BALLAST_C_API_VERSION counts additions: symbols and struct fields
 * are only ever appended, never changed or removed, within C API major 1.
 * An engine built against version N calls ballast_check_version(N) once: ok
 * on any library of version >= N. libballast's soname follows its C++ ABI,
 * so an engine that must survive a newer libballast without relinking
 * dlopen()s it and calls ballast_get_api(N): a table of every function of
 * version N, in header order (later versions only append to it).
 *
 * Threads. Every call may be made from any thread, on one handle from many
 * threads at once, unless its comment says otherwise: handles are looked up
 * under a lock and the object is held for the call, so a *_free racing a
 * use of the same handle either waits for nothing or makes the use fail
 * with BALLAST_E_INVALID_HANDLE. A status is one thread's: free it once.
 *
 * Not with plugin_api.h in one file: that is a backend plugin's side, and
 * names its own ballast_device_info, ballast_backend and BALLAST_OK.
 */
#ifndef BALLAST_BALLAST_H
#define BALLAST_BALLAST_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define BALLAST_C_API __attribute__((visibility("default")))
#else
#define BALLAST_C_API
#endif

#define BALLAST_C_API_VERSION 8u
/* type x = BALLAST_INIT(type);  sets x.size, zeroes the rest */
#ifdef __cplusplus
template <class T>
inline T ballast_init_struct() { T t{}; t.size = sizeof(T); return t; }
#define BALLAST_INIT(type) ballast_init_struct<type>()
#else
#define BALLAST_INIT(type) {.size = sizeof(type)}
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- status */
typedef enum ballast_code {  /* ballast::ErrorCode's values, plus INVALID_HANDLE */
  BALLAST_OK = 0, BALLAST_E_INVALID_ARGUMENT = 1, BALLAST_E_NOT_FOUND = 2, BALLAST_E_PATH_ESCAPES = 3,
  BALLAST_E_OUT_OF_BOUNDS = 4, BALLAST_E_SIZE_MISMATCH = 5, BALLAST_E_OVERFLOW = 6, BALLAST_E_MALFORMED = 7,
  BALLAST_E_UNSUPPORTED = 8, BALLAST_E_IO = 9, BALLAST_E_UNAVAILABLE = 10, BALLAST_E_OUT_OF_MEMORY = 11,
  BALLAST_E_DEVICE_ERROR = 12, BALLAST_E_ABI_MISMATCH = 13, BALLAST_E_WRONG_KIND = 14,
  BALLAST_E_CHECKSUM_MISMATCH = 15, BALLAST_E_INTERNAL = 16,
  BALLAST_E_INVALID_HANDLE = 64  /* NULL, freed, or another kind of handle */
} ballast_code;

typedef struct ballast_status ballast_status;
BALLAST_C_API ballast_code ballast_status_code(const ballast_status* s);
BALLAST_C_API const char* ballast_status_message(const ballast_status* s);  /* "<code>: <what> [where]" */
BALLAST_C_API void ballast_status_free(ballast_status* s);  /* once; not while another thread reads it */

/* -------------------------------------------------------- version, logging */
BALLAST_C_API uint32_t ballast_c_api_version(void);           /* this library's BALLAST_C_API_VERSION */
BALLAST_C_API const char* ballast_library_version(void);      /* "0.1.0" */
/* ok when this library provides `version`; BALLAST_E_ABI_MISMATCH otherwise. */
BALLAST_C_API ballast_status* ballast_check_version(uint32_t version);

typedef enum ballast_log_level { BALLAST_LOG_INFO = 0, BALLAST_LOG_WARNING = 1, BALLAST_LOG_ERROR = 2 } ballast_log_level;
/* Called from any thread, one call at a time, maybe under a ballast lock:
 * return quickly, never call back into ballast, but for ballast_printable()
 * (version 7) and the ballast_status_* functions, which take no lock and log
 * nothing (a sink escapes `text` with it: it is raw, and may quote a model's
 * names). Strings live for the call. */
typedef void (*ballast_log_fn)(void* user, ballast_log_level level, const char* source, const char* text);
/* Replaces the process-wide sink; NULL restores stderr. */
BALLAST_C_API ballast_status* ballast_set_log_sink(ballast_log_fn fn, void* user);

/* ------------------------------------------------------------------ model */
typedef struct ballast_model ballast_model;

typedef struct ballast_weight_info {
  size_t size;
  const char* name;
  const char* dtype;         /* "float", "float16", "uint8", "q4_k", ... */
  size_t ndims;
  const int64_t* dims;       /* ndims entries */
  uint64_t bytes;
  const char* file;          /* data file holding it; "" when stored inline in the model file */
  uint64_t offset;           /* byte offset in `file` (0 when inline) */
  /* Appended in version 6: GGUF's own name of the type ("Q4_K", "F32",
     as `ballast inspect` prints it) for a weight of a GGUF model; "" for
     the other formats, whose type names are `dtype`'s. */
  const char* gguf_type;
} ballast_weight_info;

typedef struct ballast_accounting {
  size_t size;
  uint64_t mapped_bytes;     /* every mapped data file, whole */
  uint64_t referenced_bytes; /* union of the ranges weights point at */
  uint64_t header_bytes;     /* the formats' own headers (safetensors' JSON) */
  uint64_t dead_bytes;       /* mapped, neither referenced nor header */
  size_t files;              /* mapped data files */
  size_t dead_ranges;        /* ranges, over all files (ballast_model_dead_range) */
} ballast_accounting;

typedef struct ballast_byte_range {
  size_t size;
  const char* file;
  uint64_t offset, length;
} ballast_byte_range;

/* ONNX, safetensors (a file or a sharded index), GGUF: told by the bytes. */
BALLAST_C_API ballast_status* ballast_model_open(const char* path, ballast_model** out);
BALLAST_C_API ballast_status* ballast_model_free(ballast_model* model);
/* Reads of what open computed: lock-free after the handle lookup. format: "onnx", "safetensors", "safetensors-index", "gguf". */
BALLAST_C_API ballast_status* ballast_model_format(const ballast_model* model, const char** out);
BALLAST_C_API ballast_status* ballast_model_weight_count(const ballast_model* model, size_t* out);
BALLAST_C_API ballast_status* ballast_model_weight(const ballast_model* model, size_t index, ballast_weight_info* out);
BALLAST_C_API ballast_status* ballast_model_find_weight(const ballast_model* model, const char* name, size_t* index);
BALLAST_C_API ballast_status* ballast_model_accounting(const ballast_model* model, ballast_accounting* out);
BALLAST_C_API ballast_status* ballast_model_dead_range(const ballast_model* model, size_t index, ballast_byte_range* out);
/* Copies bytes [offset, offset + length) of weight `index` as stored into dst
 * (dst_length >= length); a file truncated meanwhile is BALLAST_E_IO. */
BALLAST_C_API ballast_status* ballast_model_read_weight(const ballast_model* model, size_t index, uint64_t offset,
                                                        void* dst, size_t dst_length, uint64_t length);

/* ---------------------------------------------------------------- backend */
typedef struct ballast_backend ballast_backend;

typedef struct ballast_device_info {
  size_t size;
  const char* backend;       /* "cpu", "cuda", "hip", "vulkan", ... */
  int32_t index;
  const char* name, *uuid, *driver;
  uint64_t memory_bytes;
  /* capabilities */
  int32_t host_registration, read_only_registration, unaligned_operands, guarded_host_reads;
  uint64_t import_alignment, max_single_allocation;
  /* version 2: 1 when the backend's device pointers are addresses in this
   * process (the CPU backend): a pinned value may be read in place */
  int32_t host_visible;
} ballast_device_info;

typedef struct ballast_device_counters {
  size_t size;
  uint64_t live_allocations, live_bytes, live_registrations;
} ballast_device_counters;

/* "cpu", "vulkan:0", "cuda:GPU-...?key=value" (docs/backends.md). */
BALLAST_C_API ballast_status* ballast_backend_open(const char* config, ballast_backend** out);
BALLAST_C_API ballast_status* ballast_backend_free(ballast_backend* backend);
BALLAST_C_API ballast_status* ballast_backend_info(const ballast_backend* backend, ballast_device_info* out);
BALLAST_C_API ballast_status* ballast_backend_counters(const ballast_backend* backend, ballast_device_counters* out);

/* ------------------------------------------------------------------- plan */
typedef struct ballast_plan ballast_plan;  /* immutable */

typedef enum ballast_plan_source {
  BALLAST_PLAN_AUTOMATIC = 0,  /* the graph when the model has one, else the built-in name rules */
  BALLAST_PLAN_GRAPH = 1, BALLAST_PLAN_RULES = 2, BALLAST_PLAN_GRAPH_AND_RULES = 3
} ballast_plan_source;

typedef struct ballast_derivation_info {
  size_t size;
  const char* weight;        /* the source weight */
  const char* kind;          /* "transpose", "to_f16", "quant_int8", "repack_int4", ... */
  const char* node;          /* the consuming node; "" when planned by a rule */
  const char* why;
  uint64_t first_bytes;      /* the value, or a pair's first half */
  uint64_t second_bytes;     /* a pair's second half; 0 for single values */
} ballast_derivation_info;

BALLAST_C_API ballast_status* ballast_plan_derivations(const ballast_model* model, int32_t source /* ballast_plan_source */,
                                                       ballast_plan** out);
BALLAST_C_API ballast_status* ballast_plan_free(ballast_plan* plan);
BALLAST_C_API ballast_status* ballast_plan_count(const ballast_plan* plan, size_t* out);
BALLAST_C_API ballast_status* ballast_plan_entry(const ballast_plan* plan, size_t index, ballast_derivation_info* out);

/* -------------------------------------------------------------- residency */
typedef struct ballast_residency ballast_residency;
typedef struct ballast_pin ballast_pin;

typedef enum ballast_strategy { BALLAST_ZERO_COPY = 0, BALLAST_UPLOAD = 1, BALLAST_PAGED = 2 } ballast_strategy;

/* Enum values cross as int32_t: any value a caller passes is then defined, and refused when bad. */
typedef struct ballast_override { const char* weight; int32_t strategy; /* ballast_strategy */ } ballast_override;

typedef struct ballast_residency_options {
  size_t size;
  int32_t strategy;               /* ballast_strategy */
  uint64_t budget_bytes;          /* 0: auto for paged, unlimited otherwise */
  const ballast_plan* plan;       /* what the engine will pin (NULL: every planned derivation) */
  uint32_t kinds; /* bit 1 << kind (kind: ballast_derivation_kind_name's numbering); 0: every kind (unlike
                     C++'s DerivationPolicy, where no kind is none); a bit past the last kind: INVALID_ARGUMENT */
  int32_t no_derivations;         /* 1: source weights only */
  const char* group_by_layer;     /* e.g. "model.layers."; NULL: no groups */
  const ballast_override* overrides;
  size_t override_count;
} ballast_residency_options;

typedef struct ballast_residency_stats {
  size_t size;
  uint64_t budget_bytes, device_bytes, peak_device_bytes, pinned_bytes, registered_bytes, uploaded_bytes,
      paged_in_bytes, page_ins, source_evictions, derived_evictions, derived_builds, derived_rebuilds, prefetches,
      prefetches_skipped;
  uint64_t prefetches_failed; /* version 4: prefetches failed by the file or the device (each also logged) */
  uint64_t stuck_bytes;       /* version 4: frees the device refused: still held, asked again when room is short */
} ballast_residency_stats;

typedef struct ballast_teardown {
  size_t size;
  uint64_t bytes_freed, allocations_freed, failed_frees;
} ballast_teardown;

typedef struct ballast_value {  /* one member of a pin */
  size_t size;
  uint64_t first, second;          /* device pointers (second: pairs only) */
  uint64_t first_bytes, second_bytes;
} ballast_value;

typedef void (*ballast_progress_fn)(void* user, size_t done, size_t total);

/* `options` may be NULL (zero_copy, unlimited). Holds `model` and `backend`. */
BALLAST_C_API ballast_status* ballast_residency_create(ballast_backend* backend, const ballast_model* model,
                                                       const ballast_residency_options* options,
                                                       ballast_residency** out);
/* Releases what release() has not (pins still live keep it until they go). */
BALLAST_C_API ballast_status* ballast_residency_free(ballast_residency* residency);
/* Frees every device value and registration now; idempotent. Pins still
 * live are freed too and the status says so (INVALID_ARGUMENT); a free the
 * backend refused gives its error (counted in failed_frees). Either way
 * `out` is written all the same: the release happened. Waits for the residency's calls
 * in flight; later pins, prefetches, pin values and pin reads get INVALID_ARGUMENT. */
BALLAST_C_API ballast_status* ballast_residency_release(ballast_residency* residency, ballast_teardown* out);
/* Pins, prefetches and stats: any number of threads at once (Residency's rule).
 * The plan create() sized the budget with (a new handle); empty unless it
 * planned: a paged strategy, a budget or layer groups. */
BALLAST_C_API ballast_status* ballast_residency_plan(const ballast_residency* residency, ballast_plan** out);
BALLAST_C_API ballast_status* ballast_residency_group_count(const ballast_residency* residency, size_t* out);
BALLAST_C_API ballast_status* ballast_residency_stats_get(const ballast_residency* residency,
                                                          ballast_residency_stats* out);
/* Builds (memoized) and pins entry `index` of `plan`, a plan of the same model. */
BALLAST_C_API ballast_status* ballast_residency_pin_derivation(ballast_residency* residency, const ballast_plan* plan,
                                                               size_t index, ballast_pin** out);
BALLAST_C_API ballast_status* ballast_residency_pin_weight(ballast_residency* residency, const char* weight,
                                                           ballast_pin** out);
/* Every member of group `index` or none, waiting up to wait_ms for room (no
 * attempt starts past that: 0 is one attempt). */
BALLAST_C_API ballast_status* ballast_residency_pin_group(ballast_residency* residency, size_t index,
                                                          uint32_t wait_ms, ballast_pin** out);
/* Builds every entry of `plan` once (pinned, then unpinned: paged may evict
 * them later); `progress` (may be NULL) after each, on the calling thread,
 * outside the residency's lock: it may call the residency, and a release
 * that runs meanwhile ends the walk (INVALID_ARGUMENT). */
BALLAST_C_API ballast_status* ballast_residency_derive_all(ballast_residency* residency, const ballast_plan* plan,
                                                           ballast_progress_fn progress, void* user);
/* Pages in (and builds) in the background, best effort: never an error for lack of room. */
BALLAST_C_API ballast_status* ballast_residency_prefetch(ballast_residency* residency, const ballast_plan* plan,
                                                         size_t index);
BALLAST_C_API ballast_status* ballast_residency_prefetch_group(ballast_residency* residency, size_t index);
BALLAST_C_API ballast_status* ballast_residency_wait_prefetches(ballast_residency* residency);

/* Unpins. */
BALLAST_C_API ballast_status* ballast_pin_free(ballast_pin* pin);
/* Members: 1 for a value or weight; a group's derivations then its weights. */
BALLAST_C_API ballast_status* ballast_pin_count(const ballast_pin* pin, size_t* out);
BALLAST_C_API ballast_status* ballast_pin_value(const ballast_pin* pin, size_t member, ballast_value* out);
/* Copies [offset, offset + length) of a member's half (0: first, 1: second;
 * a single value's second half is empty) from the device into dst
 * (dst_length >= length). A weight read in place (zero_copy) is its file's
 * pages: a file truncated or changed since it was opened is BALLAST_E_IO
 * (what dst got then is not the weight's bytes). */
BALLAST_C_API ballast_status* ballast_pin_read(const ballast_pin* pin, size_t member, int half, uint64_t offset,
                                               void* dst, size_t dst_length, uint64_t length);

/* ------------------------------------------------------------ conformance */
typedef struct ballast_conformance_result {
  size_t size;
  int32_t exit_code;                 /* the suite's: 0 passed, 1 failed, 2 a bad config string (the summary says why),
                                        77 the backend is not on this machine */
  uint32_t passed, failed, skipped;  /* test cases */
} ballast_conformance_result;

/* Runs the conformance suite on `backend_config` in a child process (the
 * ballast-conformance program in the prefix's bin/, beside this library's
 * lib/), so a driver crash under it cannot take the caller down; blocks until
 * it ends (seconds on cpu, minutes on a slow device). `filter`, may be NULL:
 * test-case names, doctest wildcards ("device weights*"). `json`: its JSON
 * summary, NUL-terminated, cut to `json_capacity` (may be NULL with
 * capacity 0); `json_length` (may be NULL) gets the summary's full length.
 * UNAVAILABLE when the runner is not installed, IO when it cannot be started,
 * DEVICE_ERROR when it died of a signal, INVALID_ARGUMENT when it exits
 * non-zero with no summary (it refused its arguments; its message is on
 * stderr). A failing suite is not an error status: read exit_code. The
 * child shares the caller's stderr: the suite's own report (each case, each
 * failure's detail) goes there in every case, for a person to read. */
BALLAST_C_API ballast_status* ballast_run_conformance(const char* backend_config, const char* filter,
                                                      ballast_conformance_result* out, char* json,
                                                      size_t json_capacity, size_t* json_length);

/* ------------------------------------------------------------- version 2 */
/* Appended for zero-copy consumers (the Python module's DLPack export). */

/* A second handle to the same model, freed on its own: the model (and its
 * mapping) lives while any of its handles, plans or residencies does. */
BALLAST_C_API ballast_status* ballast_model_retain(const ballast_model* model, ballast_model** out);
/* The address of weight `index`'s bytes as stored, in the model's mapping
 * (or its file's inline bytes): host memory, read-only, valid while any
 * handle to the model lives. A file changed since it was opened is
 * BALLAST_E_IO here; one truncated after this call faults on a read of the
 * lost pages (ballast_model_read_weight checks as it copies instead). */
BALLAST_C_API ballast_status* ballast_model_weight_data(const ballast_model* model, size_t index, const void** out);

typedef struct ballast_value_layout {
  size_t size;
  const char* dtype;         /* the elements: "float", "float16", "int8", "uint32", "uint8", ... */
  size_t ndims;
  const int64_t* dims;       /* ndims entries, dense row-major, outermost first (as `ballast derive --dump` shapes it) */
  uint64_t bytes;
} ballast_value_layout;

/* How half `half` (0: first, 1: second, pairs only) of entry `index` of
 * `plan` is laid out on the device. Strings and dims live as long as the plan. */
BALLAST_C_API ballast_status* ballast_plan_entry_layout(const ballast_plan* plan, size_t index, int half,
                                                        ballast_value_layout* out);

/* ------------------------------------------------------------- version 3 */
/* The name of derivation kind `kind` ("transpose", "to_f16", ...: the bit
 * 1 << kind of ballast_residency_options.kinds, and ballast_derivation_info's
 * `kind`), static; NULL when `kind` is past the last one this library has.
 * Bindings list the kinds from it rather than keeping a copy. */
BALLAST_C_API const char* ballast_derivation_kind_name(uint32_t kind);

/* ------------------------------------------------------------- version 4 */
/* The cold start (Residency::load(), docs/loading.md): the model put on the
 * device from storage in large parallel reads of its referenced bytes only,
 * derivations built as their sources arrive. */

typedef enum ballast_read_engine {
  BALLAST_READ_AUTO = 0,     /* io_uring where the kernel offers it, else threads */
  BALLAST_READ_IO_URING = 1, /* UNSUPPORTED where the kernel does not offer it */
  BALLAST_READ_THREADS = 2   /* queue_depth threads of pread */
} ballast_read_engine;

typedef enum ballast_cache_policy {
  BALLAST_CACHE_AUTO = 0, /* drop, except a paged residency that leaves values for demand keeps */
  BALLAST_CACHE_DROP = 1, /* what was read leaves the page cache once on the device */
  BALLAST_CACHE_KEEP = 2
} ballast_cache_policy;

typedef struct ballast_load_options { /* zero fields: the defaults */
  size_t size;
  int32_t engine;                /* ballast_read_engine */
  int32_t cache;                 /* ballast_cache_policy */
  uint32_t queue_depth;          /* reads in flight; 0: 16; at most 1024 */
  uint32_t staging_buffers;      /* 0: 16; at most 1024 */
  uint64_t chunk_bytes;          /* largest single read; 0: 2 MiB; at most 1 GiB */
  int32_t direct_io;             /* 1: O_DIRECT where the file system takes it */
  int32_t read_cached;           /* 1: read sources the page cache holds whole too (0: copy them from the mapping) */
  uint32_t populate_threads;     /* zero_copy's page faults taken ahead; 0: one per hardware thread; at most 256 run */
  uint64_t populate_piece_bytes; /* 0: 8 MiB */
} ballast_load_options;

typedef struct ballast_load_report { /* every figure is of this call */
  size_t size;
  uint64_t planned_bytes, planned_ranges, planned_files; /* the read plan: referenced bytes of the sources it fills */
  uint64_t read_bytes, io_bytes, reads, read_files, direct_files, mapped_files, staging_bytes, peak_staging_in_use;
  uint64_t sources_read, sources_cached, cached_bytes, inline_sources, zero_copy_weights, populated_bytes,
      zero_copy_uploads, derived_built, already_resident, left_for_demand, left_bytes;
  int32_t engine;               /* ballast_read_engine that ran; AUTO when nothing was read */
  int32_t cache;                /* ballast_cache_policy that ran (never AUTO) */
  double read_seconds, seconds; /* the read; the whole call */
} ballast_load_report;

/* Loads ahead of use: every planned derivation and its sources, then every
 * other weight, up to the budget (the rest is left for pins, counted in
 * left_for_demand). Nothing is pinned or evicted. `options` may be NULL
 * (defaults), `out` may be NULL. On an error, values completed so far stay
 * resident and whole. Call it from one thread, before the engine pins. */
BALLAST_C_API ballast_status* ballast_residency_load(ballast_residency* residency, const ballast_load_options* options,
                                                     ballast_load_report* out);

/* ------------------------------------------------------------ version 5 */
/* Extensions: a pointer a backend's plugin hands out by name (plugin ABI
 * 1.1's get_proc_address; docs/plugins.md). What the pointer is, is the
 * extension's own contract. *out is NULL when there is none of that name
 * (a plugin of ABI 1.0 has none); a NULL `name` is INVALID_ARGUMENT.
 * ballast_backend_extension: the opened device's own (valid while the
 * backend handle lives). ballast_plugin_extension: the plugin's, by
 * backend name ("cuda"), found or loaded as ballast_backend_open would,
 * opening no device; its errors for the name are ballast_backend_open's
 * (plugins are never unloaded, so the pointer stays valid). */
BALLAST_C_API ballast_status* ballast_backend_extension(const ballast_backend* backend, const char* name, void** out);
BALLAST_C_API ballast_status* ballast_plugin_extension(const char* backend_name, const char* name, void** out);

/* ------------------------------------------------------------ version 7 */
/* `length` bytes at `text` (a weight's name, a file, a status message: bytes
 * a model chose) escaped to show on a terminal, exactly as the ballast
 * command line shows them (docs/security.md, "What a terminal shows"):
 * printable ASCII and valid UTF-8 of printable characters kept; control
 * bytes, C1 controls and each byte of invalid UTF-8 as \xNN; bidirectional
 * controls as \u{XXXX}; a backslash as \\. The result is one line of valid
 * UTF-8 with no NUL. `text` may be NULL when `length` is 0. With `out` NULL
 * and `capacity` 0 it is a size query: *needed gets the escaped length
 * (without the NUL). Otherwise `out` gets the escaped text and a NUL when
 * capacity > that length, and *needed (may be NULL) the length; a smaller
 * capacity is OUT_OF_BOUNDS, naming both, and writes nothing. */
BALLAST_C_API ballast_status* ballast_printable(const char* text, size_t length, char* out, size_t capacity,
                                                size_t* needed);

/* ------------------------------------------------------------ version 8 */
/* The model's load notes: what the file holds that ballast read past or that
 * an engine should know (a sparse initializer not loaded, an initializer a
 * caller may override as a graph input, an unknown external-data key;
 * docs/weight_store.md), as `ballast inspect` lists them. *tensor (the
 * tensor or node the note is about, maybe "") and *message live as long as
 * the model handle; either output may be NULL. An index past the count is
 * OUT_OF_BOUNDS. */
BALLAST_C_API ballast_status* ballast_model_note_count(const ballast_model* model, size_t* out);
BALLAST_C_API ballast_status* ballast_model_note(const ballast_model* model, size_t index, const char** tensor,
                                                 const char** message);
/* Changes a live residency's budget (docs/residency.md, "Changing the budget
 * of a live residency"): raised, pins waiting for room try again at once;
 * lowered below what is held, pooled blocks and unpinned evictable values
 * go in the policy's order until it fits, and a group pin waiting for room
 * that the new budget cannot hold fails at once. `bytes` is the budget
 * itself: UINT64_MAX lifts the bound, and 0 is a budget of 0 bytes (not
 * create's "auto"). Refused, changing nothing: INVALID_ARGUMENT below the
 * minimum create would refuse (the largest pin beside what stays), for a
 * residency created without a budget (budget_bytes 0 and not paged;
 * UINT64_MAX is a budget, unlimited, which this may bound), or after
 * release; OUT_OF_MEMORY when what cannot be evicted now (pinned, being
 * loaded, kept for the model's life) is above it. */
BALLAST_C_API ballast_status* ballast_residency_set_budget(ballast_residency* residency, uint64_t bytes);

/* ---------------------------------------------------- the function table */
/* Version 1: every function of version 1, in header order. Later versions append. */
typedef struct ballast_api_v1 {
  uint32_t version;
  ballast_code (*status_code)(const ballast_status*);
  const char* (*status_message)(const ballast_status*);
  void (*status_free)(ballast_status*);
  uint32_t (*c_api_version)(void);
  const char* (*library_version)(void);
  ballast_status* (*check_version)(uint32_t);
  ballast_status* (*set_log_sink)(ballast_log_fn, void*);
  ballast_status* (*model_open)(const char*, ballast_model**);
  ballast_status* (*model_free)(ballast_model*);
  ballast_status* (*model_format)(const ballast_model*, const char**);
  ballast_status* (*model_weight_count)(const ballast_model*, size_t*);
  ballast_status* (*model_weight)(const ballast_model*, size_t, ballast_weight_info*);
  ballast_status* (*model_find_weight)(const ballast_model*, const char*, size_t*);
  ballast_status* (*model_accounting)(const ballast_model*, ballast_accounting*);
  ballast_status* (*model_dead_range)(const ballast_model*, size_t, ballast_byte_range*);
  ballast_status* (*model_read_weight)(const ballast_model*, size_t, uint64_t, void*, size_t, uint64_t);
  ballast_status* (*backend_open)(const char*, ballast_backend**);
  ballast_status* (*backend_free)(ballast_backend*);
  ballast_status* (*backend_info)(const ballast_backend*, ballast_device_info*);
  ballast_status* (*backend_counters)(const ballast_backend*, ballast_device_counters*);
  ballast_status* (*plan_derivations)(const ballast_model*, int32_t, ballast_plan**);
  ballast_status* (*plan_free)(ballast_plan*);
  ballast_status* (*plan_count)(const ballast_plan*, size_t*);
  ballast_status* (*plan_entry)(const ballast_plan*, size_t, ballast_derivation_info*);
  ballast_status* (*residency_create)(ballast_backend*, const ballast_model*, const ballast_residency_options*,
                                      ballast_residency**);
  ballast_status* (*residency_free)(ballast_residency*);
  ballast_status* (*residency_release)(ballast_residency*, ballast_teardown*);
  ballast_status* (*residency_plan)(const ballast_residency*, ballast_plan**);
  ballast_status* (*residency_group_count)(const ballast_residency*, size_t*);
  ballast_status* (*residency_stats_get)(const ballast_residency*, ballast_residency_stats*);
  ballast_status* (*residency_pin_derivation)(ballast_residency*, const ballast_plan*, size_t, ballast_pin**);
  ballast_status* (*residency_pin_weight)(ballast_residency*, const char*, ballast_pin**);
  ballast_status* (*residency_pin_group)(ballast_residency*, size_t, uint32_t, ballast_pin**);
  ballast_status* (*residency_derive_all)(ballast_residency*, const ballast_plan*, ballast_progress_fn, void*);
  ballast_status* (*residency_prefetch)(ballast_residency*, const ballast_plan*, size_t);
  ballast_status* (*residency_prefetch_group)(ballast_residency*, size_t);
  ballast_status* (*residency_wait_prefetches)(ballast_residency*);
  ballast_status* (*pin_free)(ballast_pin*);
  ballast_status* (*pin_count)(const ballast_pin*, size_t*);
  ballast_status* (*pin_value)(const ballast_pin*, size_t, ballast_value*);
  ballast_status* (*pin_read)(const ballast_pin*, size_t, int, uint64_t, void*, size_t, uint64_t);
  ballast_status* (*run_conformance)(const char*, const char*, ballast_conformance_result*, char*, size_t, size_t*);
} ballast_api_v1;

/* Version 2: version 1's table, then the version 2 functions in header order. */
typedef struct ballast_api_v2 {
  ballast_api_v1 v1;
  ballast_status* (*model_retain)(const ballast_model*, ballast_model**);
  ballast_status* (*model_weight_data)(const ballast_model*, size_t, const void**);
  ballast_status* (*plan_entry_layout)(const ballast_plan*, size_t, int, ballast_value_layout*);
} ballast_api_v2;

/* Version 3: version 2's table, then the version 3 functions. */
typedef struct ballast_api_v3 {
  ballast_api_v2 v2;
  const char* (*derivation_kind_name)(uint32_t);
} ballast_api_v3;

/* Version 4: version 3's table, then the version 4 functions. */
typedef struct ballast_api_v4 {
  ballast_api_v3 v3;
  ballast_status* (*residency_load)(ballast_residency*, const ballast_load_options*, ballast_load_report*);
} ballast_api_v4;

/* Version 5: version 4's table, then the version 5 functions. */
typedef struct ballast_api_v5 {
  ballast_api_v4 v4;
  ballast_status* (*backend_extension)(const ballast_backend*, const char*, void**);
  ballast_status* (*plugin_extension)(const char*, const char*, void**);
} ballast_api_v5;

/* Version 6: version 5's table (version 6 appended a struct field,
   ballast_weight_info.gguf_type, and no function). */
typedef struct ballast_api_v6 {
  ballast_api_v5 v5;
} ballast_api_v6;

/* Version 7: version 6's table, then the version 7 function. */
typedef struct ballast_api_v7 {
  ballast_api_v6 v6;
  ballast_status* (*printable)(const char*, size_t, char*, size_t, size_t*);
} ballast_api_v7;

/* Version 8: version 7's table, then the version 8 functions. */
typedef struct ballast_api_v8 {
  ballast_api_v7 v7;
  ballast_status* (*model_note_count)(const ballast_model*, size_t*);
  ballast_status* (*model_note)(const ballast_model*, size_t, const char**, const char**);
  ballast_status* (*residency_set_budget)(ballast_residency*, uint64_t);
} ballast_api_v8;

/* The table for `version` (a pointer to static data, never freed; cast it to
 * that version's struct), or NULL when this library is older than `version`. */
BALLAST_C_API const void* ballast_get_api(uint32_t version);

#ifdef __cplusplus
}
#endif

#endif /* BALLAST_BALLAST_H */
