// The NCCL communicator (comm_plugin.h): rounds only. NCCL pairs every
// send with a receive of a count both ranks know and has no receive from
// any rank, so the table's send and receive are NULL and the cooperative
// load trades in rounds (Communicator::exchange): each round first trades
// the sizes (one uint64 per pair), then the bytes, both as one NCCL group
// of ncclSend/ncclRecv between device buffers on this rank's CUDA device.
// The host bytes go through one device staging buffer that grows to the
// largest round (the load's rounds are bounded by round_bytes).
//
// Opening: with the engine's ncclComm_t (`native`), that communicator is
// used and never destroyed. Otherwise one is made: rank and world come
// from the launcher's environment (BALLAST_RANK/BALLAST_WORLD, Open MPI's,
// PMI's, Slurm's, torchrun's), and at world > 1 rank 0's ncclUniqueId
// goes to the others through a file on a filesystem every rank sees
// (id_file=PATH), tagged with the job's id so that a stale file from an
// earlier job is never taken.
//
// Waiting: the communicator is made non-blocking (ncclConfig_t.blocking
// = 0) and every wait polls the stream and ncclCommGetAsyncError against
// the deadline, so a dead peer is a timeout, never a hang. NCCL has no way
// to tell the peers that this rank failed: fail() marks it, and the
// peers end at their deadline (docs/distributed.md, "NCCL").
#include <ballast/comm_plugin.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace {

// The ABI's error codes (plugin_api.h, through comm_plugin.h).
constexpr int kUnavailable = BALLAST_UNAVAILABLE, kInvalid = BALLAST_INVALID_ARGUMENT,
              kOutOfMemory = BALLAST_OUT_OF_MEMORY, kDeviceError = BALLAST_DEVICE_ERROR;

using Clock = std::chrono::steady_clock;

void say(char* error, std::size_t size, const std::string& text) {
  if (size > 0) std::snprintf(error, size, "%s", text.c_str());
}

void pause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

// The first of these environment variables that is set, as a number.
bool env_number(std::initializer_list<const char*> names, long& out) {
  for (const char* name : names)
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end == nullptr || *end != '\0' || n < 0) return false;
      out = n;
      return true;
    }
  return false;
}

// A tag for this job, so that an id file of an earlier job is not read.
std::string job_tag() {
  for (const char* name : {"BALLAST_JOB", "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"})
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  return "";
}

struct Options {
  long device = -1;
  std::string id_file;
  long timeout_s = 60;
};

// "device=N&id_file=PATH&timeout_s=S", any of them, in any order.
bool parse(const char* text, Options& o, std::string& why) {
  std::string s = text == nullptr ? "" : text;
  std::size_t at = 0;
  while (at < s.size()) {
    const std::size_t end = std::min(s.find('&', at), s.size());
    const std::string item = s.substr(at, end - at);
    at = end + 1;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (eq == std::string::npos || value.empty()) {
      why = "option \"" + item + "\" has no value";
      return false;
    }
    if (key == "id_file") {
      o.id_file = value;
      continue;
    }
    if (key != "device" && key != "timeout_s") {
      why = "unknown option \"" + key + "\" (the nccl communicator takes device, id_file and timeout_s)";
      return false;
    }
    char* e = nullptr;
    const long n = std::strtol(value.c_str(), &e, 10);
    if (*e != '\0' || n < 0 || (key == "timeout_s" && (n < 1 || n > 86400))) {
      why = "option " + key + "=" + value + " is not a number in range";
      return false;
    }
    if (key == "device") o.device = n;
    else if (key == "timeout_s") o.timeout_s = n;
    else {
      why = "unknown option \"" + key + "\" (the nccl communicator takes device, id_file and timeout_s)";
      return false;
    }
  }
  return true;
}

}  // namespace

struct ballast_comm {
  ncclComm_t comm = nullptr;
  bool owned = false;  // made here: destroyed (or aborted) at close
  int rank = 0, world = 1, device = 0;
  cudaStream_t stream = nullptr;
  void* staging = nullptr;  // device memory for a round's sizes and bytes
  std::size_t staging_bytes = 0;
  bool failed = false;      // this rank failed, or a wait gave up: nothing more is sent
  std::string failure;
};

namespace {

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
  if (comm != nullptr)
    if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0') text += std::string(" (") + last + ")";
  return text;
}

// One look at the communicator: 0 while no call failed (*busy: one is
// still in progress), kDeviceError once one did.
int look(ballast_comm* c, const std::string& what, bool& busy, char* error, std::size_t error_size) {
  ncclResult_t state = ncclSuccess;
  if (const ncclResult_t r = ncclCommGetAsyncError(c->comm, &state); r != ncclSuccess) state = r;
  busy = state == ncclInProgress;
  if (state == ncclSuccess || busy) return 0;
  c->failed = true;
  say(error, error_size, what + ": " + nccl_text(state, c->comm));
  return kDeviceError;
}

// The deadline passed with a peer still missing: this communicator gives up.
int too_late(ballast_comm* c, const std::string& what, char* error, std::size_t error_size) {
  c->failed = true;
  say(error, error_size, what + ": not every rank of " + std::to_string(c->world) + " took part in time");
  return kUnavailable;
}

// Waits until the communicator has no call in progress (a non-blocking
// communicator returns ncclInProgress from calls that go on), or deadline.
int settle(ballast_comm* c, Clock::time_point deadline, const std::string& what, char* error, std::size_t error_size) {
  for (bool busy = true;;) {
    if (const int rc = look(c, what, busy, error, error_size); rc != 0) return rc;
    if (!busy) return 0;
    if (Clock::now() >= deadline) return too_late(c, what, error, error_size);
    pause();
  }
}

// Waits for the stream's work (the group's transfers and the copies).
int drain(ballast_comm* c, Clock::time_point deadline, const std::string& what, char* error, std::size_t error_size) {
  if (const int rc = settle(c, deadline, what, error, error_size); rc != 0) return rc;
  for (bool busy = false;;) {
    const cudaError_t q = cudaStreamQuery(c->stream);
    if (q == cudaSuccess) return 0;
    if (q != cudaErrorNotReady) {
      c->failed = true;
      say(error, error_size, what + ": " + cudaGetErrorString(q));
      return kDeviceError;
    }
    if (const int rc = look(c, what, busy, error, error_size); rc != 0) return rc;
    if (Clock::now() >= deadline) return too_late(c, what, error, error_size);
    pause();
  }
}

// `device` current on this thread for a scope, then the caller's own
// again: the engine's threads keep the device they had.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = previous_ == device ? cudaSuccess : cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (previous_ >= 0 && status_ == cudaSuccess) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

int cuda_check(ballast_comm* c, cudaError_t e, const std::string& what, char* error, std::size_t error_size) {
  if (e == cudaSuccess) return 0;
  if (c != nullptr) c->failed = true;
  say(error, error_size, what + ": " + cudaGetErrorString(e));
  return e == cudaErrorMemoryAllocation ? kOutOfMemory : kDeviceError;
}

int nccl_check(ballast_comm* c, ncclResult_t r, const std::string& what, char* error, std::size_t error_size) {
  if (r == ncclSuccess || r == ncclInProgress) return 0;
  c->failed = true;
  say(error, error_size, what + ": " + nccl_text(r, c->comm));
  return kDeviceError;
}

// Rank 0's id through the file; the others wait for it (with this job's tag).
int share_id(const Options& o, int rank, ncclUniqueId& id, Clock::time_point deadline, char* error, std::size_t error_size) {
  const std::string tag = job_tag();
  if (rank == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      say(error, error_size, std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
      return kUnavailable;
    }
    const std::string tmp = o.id_file + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << tag << '\n';
      f.write(id.internal, sizeof id.internal);
      f.close();  // the write's last bytes reach the file here: a full disk shows now, not never
      if (!f) {
        std::remove(tmp.c_str());
        say(error, error_size, "writing the NCCL id to " + tmp + " failed");
        return kInvalid;
      }
    }
    if (std::rename(tmp.c_str(), o.id_file.c_str()) != 0) {
      const int err = errno;
      std::remove(tmp.c_str());
      say(error, error_size, "renaming " + tmp + " to " + o.id_file + ": " + std::strerror(err));
      return kInvalid;
    }
    return 0;
  }
  for (;;) {
    std::ifstream f(o.id_file, std::ios::binary);
    std::string theirs;
    if (f && std::getline(f, theirs) && theirs == tag && f.read(id.internal, sizeof id.internal)) return 0;
    if (Clock::now() >= deadline) {
      say(error, error_size, "no NCCL id from rank 0 in " + o.id_file + " (for job \"" + tag + "\") in " +
                                 std::to_string(o.timeout_s) + " s");
      return kUnavailable;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void destroy(ballast_comm* c) {
  const DeviceScope on(c->device);
  if (c->staging != nullptr) cudaFree(c->staging);
  if (c->stream != nullptr) cudaStreamDestroy(c->stream);
  // A failed rank's peers may never finish with it: abort, never wait.
  if (c->owned && c->comm != nullptr) c->failed ? ncclCommAbort(c->comm) : ncclCommDestroy(c->comm);
  delete c;
}

int open(const char* options, void* native, ballast_comm** out, char* error, std::size_t error_size) {
  *out = nullptr;
  Options o;
  std::string why;
  if (!parse(options, o, why)) {
    say(error, error_size, why);
    return kInvalid;
  }
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    say(error, error_size, std::string("no CUDA device: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "none found"));
    return kUnavailable;
  }
  auto* c = new (std::nothrow) ballast_comm;
  if (c == nullptr) {
    say(error, error_size, "no memory for the communicator");
    return kOutOfMemory;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  if (native != nullptr) {
    c->comm = *static_cast<ncclComm_t*>(native);
    int device = 0;
    if (ncclCommCount(c->comm, &c->world) != ncclSuccess || ncclCommUserRank(c->comm, &c->rank) != ncclSuccess ||
        ncclCommCuDevice(c->comm, &device) != ncclSuccess) {
      say(error, error_size, "the ncclComm_t given does not answer ncclCommCount/UserRank/CuDevice");
      delete c;
      return kInvalid;
    }
    c->device = device;
  } else {
    long rank = 0, world = 1;
    const bool has_rank = env_number({"BALLAST_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"}, rank);
    const bool has_world =
        env_number({"BALLAST_WORLD", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"}, world);
    if (has_rank != has_world || world < 1 || rank >= world) {
      say(error, error_size, "the environment gives rank " + std::to_string(rank) + " of " + std::to_string(world) +
                                 ": set both BALLAST_RANK and BALLAST_WORLD (or a launcher's pair), or neither");
      delete c;
      return kInvalid;
    }
    c->rank = static_cast<int>(rank);
    c->world = static_cast<int>(world);
    long local = 0;
    c->device = o.device >= 0 ? static_cast<int>(o.device)
                : env_number({"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}, local)
                    ? static_cast<int>(local % devices)
                    : 0;
    if (c->world > 1 && o.id_file.empty()) {
      say(error, error_size, "a world of " + std::to_string(c->world) +
                                 " ranks needs id_file=PATH (a file every rank sees) or the engine's ncclComm_t");
      delete c;
      return kInvalid;
    }
  }
  if (c->device >= devices) {
    say(error, error_size, "CUDA device " + std::to_string(c->device) + " of " + std::to_string(devices));
    delete c;
    return kInvalid;
  }
  const DeviceScope on(c->device);
  if (const int rc = cuda_check(nullptr, on.status(), "cudaSetDevice(" + std::to_string(c->device) + ")", error, error_size); rc != 0) {
    delete c;
    return rc;
  }
  if (native == nullptr) {
    ncclUniqueId id{};
    if (c->world == 1) {
      if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
        say(error, error_size, std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
        delete c;
        return kUnavailable;
      }
    } else if (const int rc = share_id(o, c->rank, id, deadline, error, error_size); rc != 0) {
      delete c;
      return rc;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&c->comm, c->world, id, c->rank, &config);
    c->owned = c->comm != nullptr;
    if (r != ncclSuccess && r != ncclInProgress) {
      say(error, error_size, std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(r));
      c->failed = true;
      destroy(c);
      return kUnavailable;
    }
    if (const int rc = settle(c, deadline, "ncclCommInitRankConfig", error, error_size); rc != 0) {
      destroy(c);
      return rc;
    }
  }
  if (const int rc = cuda_check(c, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate", error, error_size); rc != 0) {
    destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

void close(ballast_comm* c) {
  if (c != nullptr) destroy(c);
}

std::uint32_t rank(const ballast_comm* c) { return static_cast<std::uint32_t>(c->rank); }
std::uint32_t world(const ballast_comm* c) { return static_cast<std::uint32_t>(c->world); }

int refuse_after_failure(ballast_comm* c, char* error, std::size_t error_size) {
  say(error, error_size, "this rank's NCCL communicator failed earlier: " + c->failure);
  return kUnavailable;
}

// Device staging of at least `bytes`.
int reserve(ballast_comm* c, std::size_t bytes, char* error, std::size_t error_size) {
  if (bytes <= c->staging_bytes) return 0;
  if (c->staging != nullptr) cudaFree(c->staging);
  c->staging = nullptr;
  c->staging_bytes = 0;
  const std::size_t want = std::max<std::size_t>(bytes, std::size_t{1} << 20);
  if (const int rc = cuda_check(c, cudaMalloc(&c->staging, want), "cudaMalloc(" + std::to_string(want) + ") for a round", error, error_size); rc != 0)
    return rc;
  c->staging_bytes = want;
  return 0;
}

int exchange(ballast_comm* c, const void* const* sends, const std::uint64_t* sizes,
             void* (*deliver)(void*, std::uint32_t, std::uint64_t), void* context, std::int64_t timeout_ns, char* error,
             std::size_t error_size) {
  if (c->failed) return refuse_after_failure(c, error, error_size);
  const auto deadline = Clock::now() + std::chrono::nanoseconds(std::max<std::int64_t>(timeout_ns, 0));
  const DeviceScope on(c->device);
  if (const int rc = cuda_check(c, on.status(), "cudaSetDevice", error, error_size); rc != 0) return rc;
  const std::size_t n = static_cast<std::size_t>(c->world);
  // The rank's own share never goes through NCCL: it is a host copy below.
  // (At world 1 on an H200, NCCL refused the round's self-send of its bytes
  // as "send to self without a matching recv" although a receive of the
  // size just exchanged was posted in the same group; a host copy needs no
  // matching and no staging.)
  const std::size_t self = static_cast<std::size_t>(c->rank);
  // Phase 1, the sizes: [n sent][n received] uint64 at the staging's start
  // (at world 1 there is no one else to ask).
  std::vector<std::uint64_t> theirs(n, 0);
  if (n > 1) {
    if (const int rc = reserve(c, 2 * n * sizeof(std::uint64_t), error, error_size); rc != 0) return rc;
    auto* mine = static_cast<std::uint64_t*>(c->staging);
    std::uint64_t* theirs_dev = mine + n;
    if (const int rc = cuda_check(c, cudaMemcpyAsync(mine, sizes, n * sizeof(std::uint64_t), cudaMemcpyHostToDevice, c->stream), "copying a round's sizes", error, error_size); rc != 0)
      return rc;
    ncclGroupStart();
    for (std::size_t p = 0; p < n; ++p) {
      if (p == self) continue;
      ncclSend(mine + p, 1, ncclUint64, static_cast<int>(p), c->comm, c->stream);
      ncclRecv(theirs_dev + p, 1, ncclUint64, static_cast<int>(p), c->comm, c->stream);
    }
    if (const int rc = nccl_check(c, ncclGroupEnd(), "a round's sizes (ncclGroupEnd)", error, error_size); rc != 0) return rc;
    if (const int rc = cuda_check(c, cudaMemcpyAsync(theirs.data(), theirs_dev, n * sizeof(std::uint64_t), cudaMemcpyDeviceToHost, c->stream), "copying a round's sizes back", error, error_size); rc != 0)
      return rc;
    if (const int rc = drain(c, deadline, "a round's sizes", error, error_size); rc != 0) return rc;
  }
  theirs[self] = sizes[self];

  // Phase 2, the bytes to and from the other ranks: everything sent, then
  // everything received, one after another (the own share takes no room).
  std::vector<std::size_t> send_at(n), recv_at(n);
  std::size_t total = 0;
  for (std::size_t p = 0; p < n; ++p) {
    send_at[p] = total;
    if (p != self) total += (sizes[p] + 255) / 256 * 256;
  }
  for (std::size_t p = 0; p < n; ++p) {
    recv_at[p] = total;
    if (p != self) total += (theirs[p] + 255) / 256 * 256;
  }
  if (total > 0) {  // some byte goes to or comes from another rank
    if (const int rc = reserve(c, total, error, error_size); rc != 0) return rc;
    auto* base = static_cast<char*>(c->staging);
    for (std::size_t p = 0; p < n; ++p)
      if (p != self && sizes[p] > 0)
        if (const int rc = cuda_check(c, cudaMemcpyAsync(base + send_at[p], sends[p], sizes[p], cudaMemcpyHostToDevice, c->stream), "staging a round's bytes", error, error_size); rc != 0)
          return rc;
    ncclGroupStart();
    for (std::size_t p = 0; p < n; ++p) {
      if (p == self) continue;
      if (sizes[p] > 0) ncclSend(base + send_at[p], sizes[p], ncclUint8, static_cast<int>(p), c->comm, c->stream);
      if (theirs[p] > 0) ncclRecv(base + recv_at[p], theirs[p], ncclUint8, static_cast<int>(p), c->comm, c->stream);
    }
    if (const int rc = nccl_check(c, ncclGroupEnd(), "a round's bytes (ncclGroupEnd)", error, error_size); rc != 0) return rc;
    if (const int rc = drain(c, deadline, "a round's bytes", error, error_size); rc != 0) return rc;
  }
  for (std::size_t p = 0; p < n; ++p) {
    void* into = deliver(context, static_cast<std::uint32_t>(p), theirs[p]);
    if (into == nullptr) {
      say(error, error_size, "no memory for " + std::to_string(theirs[p]) + " bytes from rank " + std::to_string(p));
      return kOutOfMemory;
    }
    if (theirs[p] == 0) continue;
    if (p == self) {
      std::memcpy(into, sends[p], theirs[p]);
      continue;
    }
    const char* from = static_cast<const char*>(c->staging) + recv_at[p];
    if (const int rc = cuda_check(c, cudaMemcpy(into, from, theirs[p], cudaMemcpyDeviceToHost), "copying a round's bytes back", error, error_size); rc != 0)
      return rc;
  }
  return 0;
}

int barrier(ballast_comm* c, std::int64_t timeout_ns, char* error, std::size_t error_size) {
  if (c->failed) return refuse_after_failure(c, error, error_size);
  const auto deadline = Clock::now() + std::chrono::nanoseconds(std::max<std::int64_t>(timeout_ns, 0));
  const DeviceScope on(c->device);
  if (const int rc = cuda_check(c, on.status(), "cudaSetDevice", error, error_size); rc != 0) return rc;
  if (const int rc = reserve(c, sizeof(int), error, error_size); rc != 0) return rc;
  if (const int rc = nccl_check(c, ncclAllReduce(c->staging, c->staging, 1, ncclInt32, ncclSum, c->comm, c->stream), "the barrier (ncclAllReduce)", error, error_size); rc != 0)
    return rc;
  return drain(c, deadline, "the barrier", error, error_size);
}

void fail(ballast_comm* c, const char* why) {
  // NCCL cannot carry a word to the peers: they end at their deadline.
  if (c->failed) return;
  c->failed = true;
  try {
    c->failure = why != nullptr ? why : "failed";
  } catch (...) {
  }
}

const ballast_comm_plugin kTable = {
    sizeof(ballast_comm_plugin), BALLAST_COMM_API_MAJOR, BALLAST_COMM_API_MINOR, "nccl", open, close, rank, world,
    nullptr, nullptr, barrier, fail, exchange,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ballast_comm_plugin* ballast_comm_entry(void) { return &kTable; }
