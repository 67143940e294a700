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
 * ErrorCode (status.hpp; plugin_api.h names them): 1 invalid_argument,
 * 10 unavailable (a peer that failed or did not answer in time), 11
 * out_of_memory (also when `allocate` gave NULL), 12 device_error;
 * writing a message of at most `error_size` bytes, NUL-terminated, into
 * `error` first. No function lets a C++ exception leave it. The file is
 * named libballast_comm_<name>.so (underscores: a backend plugin's name,
 * libballast-<name>.so, never matches it).
 *
 * One communicator is used from one thread at a time (each rank's load runs
 * on one thread). */
#ifndef BALLAST_COMM_PLUGIN_H
#define BALLAST_COMM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#define BALLAST_COMM_API_MAJOR 1
#define BALLAST_COMM_API_MINOR 0

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
   * they are sent (the caller may reuse `bytes` at once). */
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
} ballast_comm_plugin;

/* The entry point's type. */
typedef const ballast_comm_plugin* (*ballast_comm_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
