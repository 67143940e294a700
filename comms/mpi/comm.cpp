// The MPI communicator (comm_plugin.h): messages between ranks as
// nonblocking point-to-point sends on a duplicate of the engine's
// communicator (or of MPI_COMM_WORLD), receives by probing with a
// deadline, a failure announced to every peer on a tag of its own.
//
// Rounds (exchange): the sizes, then the bytes, each as one MPI_Isend and
// one MPI_Irecv per peer on a tag of their own (MPI keeps the order of
// messages between two ranks on one tag, so rounds cannot cross). Not
// collectives (MPI_Ialltoall, MPI_Ialltoallv): a collective that times out
// cannot say which ranks did not come, nor be cancelled, and
// MPI_Alltoallv's int displacements cap a rank's round at 2 GiB.
//
// Why nonblocking and polled: a blocking MPI_Send of a large message waits
// for its receiver, and two ranks sending to each other would wait
// forever; a blocking receive could not give up at a deadline, and a dead
// peer would hang the load. Sends are reaped as they complete; a rank
// sleeps 50 us between polls, so ranks oversubscribed on few cores (CI's
// mpirun -np 4 on 2) leave each other the processor.
#include <ballast/comm_plugin.h>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kDataTag = 29001;
constexpr int kFailTag = 29002;
constexpr int kRoundTag = 29003;
constexpr int kSizeTag = 29004;
constexpr int kBarrierTag = 29005;
// The ABI's error codes (plugin_api.h, through comm_plugin.h).
constexpr int kUnavailable = BALLAST_UNAVAILABLE, kInvalid = BALLAST_INVALID_ARGUMENT,
              kOutOfMemory = BALLAST_OUT_OF_MEMORY, kDeviceError = BALLAST_DEVICE_ERROR;

void say(char* error, std::size_t size, const std::string& text) {
  if (size == 0) return;
  std::snprintf(error, size, "%s", text.c_str());
}

std::string mpi_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

struct Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<char> bytes;
};

bool g_initialized_here = false;
bool g_failure_seen = false;

// MPI_Finalize at exit when this library initialised MPI and no rank
// failed (a failed job's peers may never reach it, and it would wait).
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_failure_seen) MPI_Finalize();
}

}  // namespace

struct ballast_comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, world = 1;
  std::deque<Pending> pending;  // sends in flight (deque: requests stay put)
  bool announced = false;       // this rank's failure was sent
  std::string peer_failure;     // a peer's, once heard

  void reap() {
    for (auto it = pending.begin(); it != pending.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? pending.erase(it) : it + 1;
    }
  }

  // A peer's announced failure, if one has come.
  bool heard_failure() {
    if (!peer_failure.empty()) return true;
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kFailTag, comm, &flag, &status) != MPI_SUCCESS || !flag) return false;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::string why(static_cast<std::size_t>(std::max(count, 0)), '\0');
    MPI_Recv(why.data(), count, MPI_BYTE, status.MPI_SOURCE, kFailTag, comm, MPI_STATUS_IGNORE);
    peer_failure = "rank " + std::to_string(status.MPI_SOURCE) + " failed: " + why;
    g_failure_seen = true;
    return true;
  }
};

namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_of(std::int64_t timeout_ns) {
  return Clock::now() + std::chrono::nanoseconds(std::max<std::int64_t>(timeout_ns, 0));
}

void pause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

int open(const char* options, void* native, ballast_comm** out, char* error, std::size_t error_size) {
  *out = nullptr;
  if (options != nullptr && options[0] != '\0') {
    say(error, error_size, std::string("unknown option \"") + options + "\" (the mpi communicator takes none)");
    return kInvalid;
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    // Only the rank's one loading thread calls MPI, one call at a time.
    int provided = 0;
    if (const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided); rc != MPI_SUCCESS) {
      say(error, error_size, "MPI_Init_thread: " + mpi_text(rc));
      return kUnavailable;
    }
    g_initialized_here = true;
    std::atexit(finalize_at_exit);
  }
  auto* c = new (std::nothrow) ballast_comm;
  if (c == nullptr) {
    say(error, error_size, "no memory for the communicator");
    return kOutOfMemory;
  }
  const MPI_Comm base = native != nullptr ? *static_cast<MPI_Comm*>(native) : MPI_COMM_WORLD;
  if (const int rc = MPI_Comm_dup(base, &c->comm); rc != MPI_SUCCESS) {
    say(error, error_size, "MPI_Comm_dup: " + mpi_text(rc));
    delete c;
    return kDeviceError;
  }
  // Errors come back as codes, never abort the job from inside a call.
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->comm, &c->rank);
  MPI_Comm_size(c->comm, &c->world);
  *out = c;
  return 0;
}

void close(ballast_comm* c) {
  if (c == nullptr) return;
  c->reap();
  // Sends a dead or failed peer never took: their requests are freed and
  // their bytes left to the process (MPI may still read them).
  for (Pending& p : c->pending) {
    MPI_Request_free(&p.request);
    new std::vector<char>(std::move(p.bytes));  // deliberately kept
  }
  if (c->announced || !c->peer_failure.empty()) g_failure_seen = true;
  if (!g_failure_seen) MPI_Comm_free(&c->comm);
  delete c;
}

std::uint32_t rank(const ballast_comm* c) { return static_cast<std::uint32_t>(c->rank); }
std::uint32_t world(const ballast_comm* c) { return static_cast<std::uint32_t>(c->world); }

// Sends `size` bytes at `bytes` to `to` on `tag` from a copy the library
// keeps until MPI has sent it (ballast_comm::pending, reaped as sends
// complete): the caller's buffer may go at once. 0, or an error code with
// its message in `error`.
int send_kept(ballast_comm* c, int to, int tag, const void* bytes, std::uint64_t size, char* error,
              std::size_t error_size) {
  try {
    Pending p;
    p.bytes.assign(static_cast<const char*>(bytes), static_cast<const char*>(bytes) + size);
    c->pending.push_back(std::move(p));
  } catch (...) {
    say(error, error_size, "no memory to hold " + std::to_string(size) + " bytes for rank " + std::to_string(to));
    return kOutOfMemory;
  }
  Pending& p = c->pending.back();
  if (const int rc = MPI_Isend(p.bytes.data(), static_cast<int>(size), MPI_BYTE, to, tag, c->comm, &p.request);
      rc != MPI_SUCCESS) {
    c->pending.pop_back();
    say(error, error_size, "MPI_Isend to rank " + std::to_string(to) + ": " + mpi_text(rc));
    return kUnavailable;
  }
  return 0;
}

// Cancels the receives still open, so MPI never writes into their buffers
// after the call that posted them returns.
void cancel_all(std::vector<MPI_Request>& requests) {
  for (MPI_Request& r : requests) {
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
}

int send(ballast_comm* c, std::uint32_t to, const void* bytes, std::uint64_t size, char* error, std::size_t error_size) {
  if (to >= static_cast<std::uint32_t>(c->world) || size > static_cast<std::uint64_t>(INT_MAX)) {
    say(error, error_size, "a message of " + std::to_string(size) + " bytes to rank " + std::to_string(to) +
                               " (world " + std::to_string(c->world) + ", at most 2 GiB a message)");
    return kInvalid;
  }
  if (c->heard_failure()) {
    say(error, error_size, c->peer_failure);
    return kUnavailable;
  }
  c->reap();
  return send_kept(c, static_cast<int>(to), kDataTag, bytes, size, error, error_size);
}

int receive(ballast_comm* c, std::int64_t timeout_ns, std::uint32_t* from, std::uint64_t* size,
            void* (*allocate)(void*, std::uint64_t), void* context, char* error, std::size_t error_size) {
  const auto deadline = deadline_of(timeout_ns);
  for (;;) {
    if (c->heard_failure()) {
      say(error, error_size, c->peer_failure);
      return kUnavailable;
    }
    int flag = 0;
    MPI_Status status;
    if (const int rc = MPI_Iprobe(MPI_ANY_SOURCE, kDataTag, c->comm, &flag, &status); rc != MPI_SUCCESS) {
      say(error, error_size, "MPI_Iprobe: " + mpi_text(rc));
      return kUnavailable;
    }
    if (flag) {
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      void* buffer = allocate(context, static_cast<std::uint64_t>(count));
      if (buffer == nullptr) {
        say(error, error_size, "no memory for a message of " + std::to_string(count) + " bytes");
        return kOutOfMemory;
      }
      if (const int rc = MPI_Recv(buffer, count, MPI_BYTE, status.MPI_SOURCE, kDataTag, c->comm, MPI_STATUS_IGNORE);
          rc != MPI_SUCCESS) {
        say(error, error_size, "MPI_Recv from rank " + std::to_string(status.MPI_SOURCE) + ": " + mpi_text(rc));
        return kUnavailable;
      }
      *from = static_cast<std::uint32_t>(status.MPI_SOURCE);
      *size = static_cast<std::uint64_t>(count);
      return 0;
    }
    c->reap();
    if (Clock::now() >= deadline) {
      *size = UINT64_MAX;
      return 0;
    }
    pause();
  }
}

void fail(ballast_comm* c, const char* why) {
  if (c->announced) return;
  c->announced = true;
  g_failure_seen = true;
  try {
    const std::string text = why != nullptr ? why : "failed";
    for (int r = 0; r < c->world; ++r)
      if (r != c->rank) send_kept(c, r, kFailTag, text.data(), text.size(), nullptr, 0);
  } catch (...) {
    // No memory: the peers' deadlines catch this rank instead.
  }
}

// Waits for `requests` (MPI_Testall), or a peer's failure, or `deadline`.
// Not done: the receives among them are cancelled, so MPI never writes
// into the caller's buffers after the call returns (sends read copies the
// library keeps: ballast_comm::pending).
int wait_all(ballast_comm* c, std::vector<MPI_Request>& requests, const std::vector<int>& peers,
             Clock::time_point deadline, const char* what, char* error, std::size_t error_size) {
  for (;;) {
    int done = 0;
    if (const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
        rc != MPI_SUCCESS) {
      say(error, error_size, std::string(what) + ": " + mpi_text(rc));
      break;
    }
    if (done) return 0;
    if (c->heard_failure()) {
      say(error, error_size, c->peer_failure);
      break;
    }
    c->reap();
    if (Clock::now() >= deadline) {
      // A receive still open names its peer: the ranks that did not come.
      // Each is tested on its own: MPI_Testall that is not done leaves
      // every request as it was, the completed ones too.
      std::string who;
      for (std::size_t i = 0; i < requests.size() && i < peers.size(); ++i) {
        int one = 0;
        if (requests[i] != MPI_REQUEST_NULL) MPI_Test(&requests[i], &one, MPI_STATUS_IGNORE);
        if (requests[i] != MPI_REQUEST_NULL) who += (who.empty() ? "" : ", ") + std::to_string(peers[i]);
      }
      say(error, error_size, std::string(what) + ": nothing came in time from rank(s) " + who);
      g_failure_seen = true;
      break;
    }
    pause();
  }
  cancel_all(requests);
  return kUnavailable;
}

// Posts a receive of `count` `type`s from rank `r` on `tag` into `into`,
// kept in `requests` with its peer in `peers` (wait_all names the peers
// of the receives still open at a timeout).
int post_receive(ballast_comm* c, int r, void* into, int count, MPI_Datatype type, int tag,
                 std::vector<MPI_Request>& requests, std::vector<int>& peers, char* error, std::size_t error_size) {
  requests.push_back(MPI_REQUEST_NULL);
  peers.push_back(r);
  if (const int got = MPI_Irecv(into, count, type, r, tag, c->comm, &requests.back()); got != MPI_SUCCESS) {
    say(error, error_size, "MPI_Irecv from rank " + std::to_string(r) + ": " + mpi_text(got));
    return kUnavailable;
  }
  return 0;
}

// One uint64 to and from every peer on `tag` (out[r] to rank r, in[r] from
// it), point to point rather than a collective, so that a timeout can name
// the ranks that did not come: the receives first, then the sends (copies
// kept), then the wait. `what` opens a timeout's error.
int trade_words(ballast_comm* c, int tag, const std::uint64_t* out, std::uint64_t* in, Clock::time_point deadline,
                const char* what, char* error, std::size_t error_size) {
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  try {
    requests.reserve(static_cast<std::size_t>(c->world));
    peers.reserve(static_cast<std::size_t>(c->world));
  } catch (...) {
    say(error, error_size, std::string("no memory for ") + what + " of " + std::to_string(c->world) + " ranks");
    return kOutOfMemory;
  }
  int rc = 0;
  for (int r = 0; r < c->world && rc == 0; ++r)
    if (r != c->rank) rc = post_receive(c, r, &in[r], 1, MPI_UINT64_T, tag, requests, peers, error, error_size);
  for (int r = 0; r < c->world && rc == 0; ++r)
    if (r != c->rank) rc = send_kept(c, r, tag, &out[r], sizeof out[r], error, error_size);
  if (rc != 0) {
    cancel_all(requests);
    return rc;
  }
  return wait_all(c, requests, peers, deadline, what, error, error_size);
}

// A word to every peer and one from every peer on a tag of their own (MPI
// keeps their order per pair, so barriers cannot cross): not MPI_Ibarrier,
// which at a timeout can neither say which ranks did not come nor be
// cancelled. 2 (world - 1) requests a rank; the load calls it twice. After
// a timeout the job is failed (a late word would meet the next barrier),
// as after any of this library's timeouts.
int barrier(ballast_comm* c, std::int64_t timeout_ns, char* error, std::size_t error_size) {
  const auto deadline = deadline_of(timeout_ns);
  if (c->heard_failure()) {
    say(error, error_size, c->peer_failure);
    return kUnavailable;
  }
  std::vector<std::uint64_t> words;
  try {
    words.assign(2 * static_cast<std::size_t>(c->world), 0);
  } catch (...) {
    say(error, error_size, "no memory for a barrier of " + std::to_string(c->world) + " ranks");
    return kOutOfMemory;
  }
  return trade_words(c, kBarrierTag, words.data(), words.data() + c->world, deadline, "the barrier", error, error_size);
}

int exchange(ballast_comm* c, const void* const* sends, const std::uint64_t* sizes,
             void* (*deliver)(void*, std::uint32_t, std::uint64_t), void* context, std::int64_t timeout_ns, char* error,
             std::size_t error_size) {
  const auto deadline = deadline_of(timeout_ns);
  const int n = c->world;
  for (int r = 0; r < n; ++r)
    if (sizes[r] > static_cast<std::uint64_t>(INT_MAX)) {
      say(error, error_size, "a round's " + std::to_string(sizes[r]) + " bytes for rank " + std::to_string(r) +
                                 " (at most 2 GiB a peer a round)");
      return kInvalid;
    }
  if (c->heard_failure()) {
    say(error, error_size, c->peer_failure);
    return kUnavailable;
  }
  // The sizes: one uint64 each way per pair.
  std::vector<std::uint64_t> theirs(static_cast<std::size_t>(n), 0);
  if (const int traded = trade_words(c, kSizeTag, sizes, theirs.data(), deadline, "a round's sizes", error, error_size);
      traded != 0)
    return traded;

  // The bytes: receives first, then sends (copies the library keeps until sent).
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  int rc = 0;
  for (int r = 0; r < n && rc == 0; ++r) {
    const std::uint64_t size = r == c->rank ? sizes[r] : theirs[r];
    void* into = deliver(context, static_cast<std::uint32_t>(r), size);
    if (into == nullptr) {
      say(error, error_size, "no memory for " + std::to_string(size) + " bytes from rank " + std::to_string(r));
      rc = kOutOfMemory;
    } else if (r == c->rank) {
      if (size > 0) std::memcpy(into, sends[r], size);
    } else if (size > 0) {
      rc = post_receive(c, r, into, static_cast<int>(size), MPI_BYTE, kRoundTag, requests, peers, error, error_size);
    }
  }
  for (int r = 0; r < n && rc == 0; ++r)
    if (r != c->rank && sizes[r] > 0) rc = send_kept(c, r, kRoundTag, sends[r], sizes[r], error, error_size);
  if (rc != 0) {
    cancel_all(requests);
    return rc;
  }
  return wait_all(c, requests, peers, deadline, "a round's bytes", error, error_size);
}

const ballast_comm_plugin kTable = {
    sizeof(ballast_comm_plugin), BALLAST_COMM_API_MAJOR, BALLAST_COMM_API_MINOR, "mpi", open, close, rank, world, send,
    receive, barrier, fail, exchange,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ballast_comm_plugin* ballast_comm_entry(void) { return &kTable; }
