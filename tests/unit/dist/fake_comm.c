/* Fake communicator libraries (C99, as comm_plugin.h promises), one per
 * FAKE_VARIANT, each a rank 0 of a world of 1, built into one folder under
 * its own name (libballast_comm_<FAKE_NAME>.so) for test_comm_abi.cpp:
 *   1  ABI 1.0: struct_size ends before `exchange` (rounds from its messages;
 *      the slot past it holds a function the core must never call)
 *   2  ABI 1.1, rounds only: send and receive NULL, exchange a loopback
 *   3  ABI 2.0: another major, refused with both versions named
 *   4  send NULL beside a receive, no exchange: refused (half of messages) */
#include <ballast/comm_plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ballast_comm {
  int failed;
};

static int fake_open(const char* options, void* native, ballast_comm** out, char* error, size_t error_size) {
  (void)native;
  if (options != NULL && options[0] != '\0') {
    snprintf(error, error_size, "fake: no options");
    return 1;
  }
  *out = (ballast_comm*)calloc(1, sizeof(ballast_comm));
  return *out == NULL ? 11 : 0;
}
static void fake_close(ballast_comm* c) { free(c); }
static uint32_t fake_rank(const ballast_comm* c) { (void)c; return 0; }
static uint32_t fake_world(const ballast_comm* c) { (void)c; return 1; }
static int fake_send(ballast_comm* c, uint32_t to, const void* bytes, uint64_t size, char* error, size_t error_size) {
  (void)c; (void)bytes; (void)size;
  snprintf(error, error_size, "fake: no rank %u in a world of 1", to);
  return 1;
}
static int fake_receive(ballast_comm* c, int64_t timeout_ns, uint32_t* from, uint64_t* size,
                        void* (*allocate)(void*, uint64_t), void* context, char* error, size_t error_size) {
  (void)timeout_ns; (void)from; (void)allocate; (void)context;
  if (c->failed) {
    snprintf(error, error_size, "fake: failed");
    return 10;
  }
  *size = UINT64_MAX; /* nothing, ever: a world of 1 */
  return 0;
}
static int fake_barrier(ballast_comm* c, int64_t timeout_ns, char* error, size_t error_size) {
  (void)timeout_ns;
  if (c->failed) {
    snprintf(error, error_size, "fake: failed");
    return 10;
  }
  return 0;
}
static void fake_fail(ballast_comm* c, const char* why) { (void)why; c->failed = 1; }
static int fake_exchange(ballast_comm* c, const void* const* sends, const uint64_t* sizes,
                         void* (*deliver)(void*, uint32_t, uint64_t), void* context, int64_t timeout_ns, char* error,
                         size_t error_size) {
  void* into;
  (void)timeout_ns;
  if (c->failed) {
    snprintf(error, error_size, "fake: failed");
    return 10;
  }
  into = deliver(context, 0, sizes[0]);
  if (into == NULL) return 11;
  if (sizes[0] > 0) memcpy(into, sends[0], (size_t)sizes[0]);
  return 0;
}

/* Past a 1.0 table's end: a core that read it would call this. */
static int fake_beyond_the_table(ballast_comm* c, const void* const* sends, const uint64_t* sizes,
                                 void* (*deliver)(void*, uint32_t, uint64_t), void* context, int64_t timeout_ns,
                                 char* error, size_t error_size) {
  (void)c; (void)sends; (void)sizes; (void)deliver; (void)context; (void)timeout_ns;
  snprintf(error, error_size, "fake: exchange read past a 1.0 table's struct_size");
  return 1;
}

#if FAKE_VARIANT == 1
#define FAKE_SIZE BALLAST_COMM_PLUGIN_SIZE_1_0
#define FAKE_MAJOR 1
#define FAKE_MINOR 0
#define FAKE_SEND fake_send
#define FAKE_RECEIVE fake_receive
#define FAKE_EXCHANGE fake_beyond_the_table
#elif FAKE_VARIANT == 2
#define FAKE_SIZE sizeof(ballast_comm_plugin)
#define FAKE_MAJOR 1
#define FAKE_MINOR 1
#define FAKE_SEND NULL
#define FAKE_RECEIVE NULL
#define FAKE_EXCHANGE fake_exchange
#elif FAKE_VARIANT == 3
#define FAKE_SIZE sizeof(ballast_comm_plugin)
#define FAKE_MAJOR 2
#define FAKE_MINOR 0
#define FAKE_SEND fake_send
#define FAKE_RECEIVE fake_receive
#define FAKE_EXCHANGE fake_exchange
#else
#define FAKE_SIZE sizeof(ballast_comm_plugin)
#define FAKE_MAJOR 1
#define FAKE_MINOR 1
#define FAKE_SEND NULL
#define FAKE_RECEIVE fake_receive
#define FAKE_EXCHANGE NULL
#endif

static const ballast_comm_plugin table = {
    FAKE_SIZE, FAKE_MAJOR, FAKE_MINOR, FAKE_NAME, fake_open, fake_close, fake_rank, fake_world,
    FAKE_SEND, FAKE_RECEIVE, fake_barrier, fake_fail, FAKE_EXCHANGE};

__attribute__((visibility("default"))) const ballast_comm_plugin* ballast_comm_entry(void) { return &table; }
