/* The communicator plugin ABI (issue 29; docs/distributed.md,
 * "Communicators"): what crosses the boundary of a communicator library
 * (libballast_comm_<name>.so, e.g. the MPI one). Plain C99, like the
 * backend ABI (plugin_api.h), so a communicator may be built by any
 * compiler against any standard library.
 *
 * A communicator library exports one function, ballast_comm_entry(), that
 * returns a ballast_comm_plugin table. The core reads its frozen prefix
 * (struct_size, api_major, api_minor, name), refuses another major with
 * both versions named, and then only calls through the function pointers.
 * Every function returns 0 or an error code, the values of ballast's
 * ErrorCode (status.hpp), named by plugin_api.h (included here):
 * BALLAST_INVALID_ARGUMENT, BALLAST_UNAVAILABLE (a peer that failed or did
 * not answer in time), BALLAST_OUT_OF_MEMORY (also when `allocate` gave
 * NULL), BALLAST_DEVICE_ERROR;
 * writing a message of at most `error_size` bytes, NUL-terminated, into
 * `error` first. No function lets a C++ exception leave it. The file is
 * named libballast_comm_<name>.so (underscores: a backend plugin's name,
 * libballast-<name>.so, never matches it).
 *
 * One communicator is used from one thread at a time (each rank's load runs
 * on one thread).
 *
 * Versions: 1.0 had the functions up to `fail`; 1.1 appends `exchange`.
 * The core reads `exchange` only when struct_size covers it, so a 1.0
 * library still loads (its rounds are built from send and receive). */
#ifndef BALLAST_COMM_PLUGIN_H
#define BALLAST_COMM_PLUGIN_H

#include <ballast/plugin_api.h> /* the error codes */

#include <stddef.h>
#include <stdint.h>

#define BALLAST_COMM_API_MAJOR 1
#define BALLAST_COMM_API_MINOR 1

/* The one symbol a communicator library exports. */
#define BALLAST_COMM_ENTRY_SYMBOL "ballast_comm_entry"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ballast_comm ballast_comm; /* the library's own state */

typedef struct ballast_comm_plugin {
  /* Frozen prefix. */
  size_t struct_size;
  uint32_t api_major;
  uint32_t api_minor;
  const char* name; /* "mpi": the config string that picks it */

  /* Opens a communicator. `options`: the config string after "<name>?"
   * (may be empty). `native`: NULL, or the engine's own communicator of
   * this kind (for MPI a pointer to an MPI_Comm, which is duplicated, never
   * freed). */
  int (*open)(const char* options, void* native, ballast_comm** out, char* error, size_t error_size);
  /* Frees what open made. Never blocks on a peer. */
  void (*close)(ballast_comm* comm);

  uint32_t (*rank)(const ballast_comm* comm);
  uint32_t (*world)(const ballast_comm* comm);

  /* Sends `size` bytes to rank `to`; the library copies or keeps them until
   * they are sent (the caller may reuse `bytes` at once). `send` and
   * `receive` may both be NULL in a library that has only `exchange`
   * (NCCL's: no receive from any rank). */
  int (*send)(ballast_comm* comm, uint32_t to, const void* bytes, uint64_t size, char* error, size_t error_size);

  /* Waits up to `timeout_ns` for the next message from any rank. None by
   * then: returns 0 with *size = UINT64_MAX. A message: its sender in
   * *from, its bytes copied into a buffer of `allocate(context, size)`
   * (the caller's allocator; it may return NULL for no memory). A failure
   * announced by a peer: BALLAST_UNAVAILABLE with its rank and reason. */
  int (*receive)(ballast_comm* comm, int64_t timeout_ns, uint32_t* from, uint64_t* size,
                 void* (*allocate)(void* context, uint64_t size), void* context, char* error, size_t error_size);

  /* Every rank, or BALLAST_UNAVAILABLE after `timeout_ns` or a peer's failure. */
  int (*barrier)(ballast_comm* comm, int64_t timeout_ns, char* error, size_t error_size);

  /* Tells every other rank that this one failed with `why` (best effort,
   * never blocks). */
  void (*fail)(ballast_comm* comm, const char* why);

  /* 1.1. One round of a collective exchange (Communicator::exchange in
   * communicator.hpp): every rank calls it, the same number of times.
   * `sends[r]` (`sizes[r]` bytes, NULL when 0) goes to rank r, this rank's
   * own included; the library copies them or keeps them until it returns.
   * What rank r gave this one is copied into a buffer of
   * deliver(context, r, size) (the caller's; NULL: no memory, return
   * BALLAST_OUT_OF_MEMORY), once per rank, before it returns. A peer's
   * announced failure or the timeout: BALLAST_UNAVAILABLE, naming the ranks.
   * NULL: the core builds rounds from send and receive. */
  int (*exchange)(ballast_comm* comm, const void* const* sends, const uint64_t* sizes,
                  void* (*deliver)(void* context, uint32_t from, uint64_t size), void* context, int64_t timeout_ns,
                  char* error, size_t error_size);
} ballast_comm_plugin;

/* The size of a 1.0 table: what the core requires at least. */
#define BALLAST_COMM_PLUGIN_SIZE_1_0 (offsetof(ballast_comm_plugin, exchange))

/* The entry point's type. */
typedef const ballast_comm_plugin* (*ballast_comm_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
