// How the ranks of a distributed engine reach one another (issue 29): the
// cooperative load (cooperative_load.hpp) sends each rank the bytes of its
// shards that another rank read from storage, through a Communicator.
//
//   auto ranks = make_local_communicators(4);     // 4 ranks as threads of one process
//   // thread r: cooperative_load(model, *plans, *load, *(*ranks)[r], options)
//
// The interface is the few operations the load needs, so that an MPI or
// NCCL implementation, or an engine's own transport, is a small class:
// ordered messages between two ranks (a message sent from A to B is
// received by B after every earlier message from A to B), a receive from
// whichever rank sent first, and a way for a failing rank to make every
// other rank's waits end with an error naming it, so that no rank hangs.
//
// Two ways to move bytes, because transports differ in what they can do:
//   - messages (send, receive from any rank): MPI and threads. The load
//     streams: each chunk goes out as soon as it is read.
//   - rounds (exchange: every rank gives every rank a buffer, collectively):
//     NCCL, which can only pair a send with a receive of a size both sides
//     know, has no receive from any rank, and no way to probe. The load
//     gathers what it read for its peers and trades it in bounded rounds.
// A communicator that only has messages gets exchange() for free (the
// default below, over send and receive); one that only has rounds answers
// any_source() false and refuses send and receive (unsupported).
#pragma once

#include <ballast/export.hpp>
#include <ballast/status.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

// A received message: the rank that sent it and its bytes.
struct CommMessage {
  std::uint32_t from = 0;
  std::vector<std::byte> bytes;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::uint32_t rank() const noexcept = 0;
  virtual std::uint32_t world() const noexcept = 0;
  // "local", "mpi", ...: shown in reports and errors.
  virtual std::string name() const = 0;

  // Sends `bytes` to rank `to` (not this rank). The bytes are the
  // communicator's from here on; the call may return before they arrive.
  // Fails when `to` is outside the world, or after a failure was
  // announced (fail(), or a peer's).
  virtual Status send(std::uint32_t to, std::vector<std::byte> bytes) = 0;

  // The next message from any rank, waiting until `deadline` at most:
  // nullopt when none came by then. A failure announced by any rank ends
  // the wait at once with that failure's error, naming the rank.
  virtual Result<std::optional<CommMessage>> receive(std::chrono::steady_clock::time_point deadline) = 0;

  // Waits until every rank has called barrier() or `deadline` passes (an
  // error naming the ranks that had not arrived), or a failure is announced.
  virtual Status barrier(std::chrono::steady_clock::time_point deadline) = 0;

  // Announces that this rank failed with `why`: every rank's pending and
  // later receive() and barrier() end with an error naming this rank and
  // `why`. Best effort (a rank that died announces nothing: its peers'
  // deadlines catch it). Idempotent.
  virtual void fail(const Status& why) noexcept = 0;

  // Whether send() and receive() work (false: rounds only, as NCCL).
  virtual bool any_source() const noexcept { return true; }

  // One round of a collective exchange: every rank of the world calls it,
  // the same number of times and in the same order against barrier().
  // `to` has one buffer per rank (to.size() == world(); empty for
  // nothing): to[r] goes to rank r, to[rank()] comes back to this rank.
  // Returns one buffer per rank: what rank r gave this one. The sizes are
  // not agreed beforehand: a round carries them. A failure announced by
  // any rank ends the wait with its error, naming the rank; `deadline` as
  // receive(), an error naming the ranks not heard from. The default
  // builds a round from send() and receive(), keeping a peer's next
  // round's buffer if it comes early; it must not be mixed with messages
  // of one's own in flight.
  virtual Result<std::vector<std::vector<std::byte>>> exchange(std::vector<std::vector<std::byte>> to,
                                                               std::chrono::steady_clock::time_point deadline);

 private:
  // The default exchange's buffers that came a round early, per rank.
  std::vector<std::deque<std::vector<std::byte>>> early_;
};

// `world` ranks in this process, one communicator each, to be used from
// one thread per rank (a communicator is not shared between threads; the
// ranks' threads are). For tests and for single-node engines that do not
// want MPI. invalid_argument for world 0 or above 4096.
Result<std::vector<std::unique_ptr<Communicator>>> make_local_communicators(std::uint32_t world);

// A communicator library picked by a config string, like a backend.
// The mpi library initialises MPI (MPI_THREAD_SERIALIZED: one call at a
// time, from any thread) unless the engine has, and finalises it at exit
// only when it initialised it and no rank failed (a failed job's peers may
// never reach MPI_Finalize). An engine that initialised MPI itself with
// MPI_THREAD_FUNNELED must call the load from its main thread.
//   "mpi"            libballast_comm_mpi.so (Open MPI; MPI_COMM_WORLD, duplicated),
//                    initialising MPI if the engine has not
//   "mpi?<options>"  the same, with the library's own options
//   "nccl[?device=N&id_file=PATH&timeout_s=S]"
//                    libballast_comm_nccl.so (NVIDIA's NCCL; rounds only,
//                    through device buffers on CUDA device N); rank and
//                    world from the launcher's environment, the NCCL id
//                    passed through PATH on a shared filesystem
//                    (docs/distributed.md, "NCCL")
// `native`: nullptr, or the engine's own communicator of that kind (for
// "mpi" a pointer to its MPI_Comm, duplicated, never freed; for "nccl" a
// pointer to its ncclComm_t, used, never destroyed), so an engine
// that already runs on MPI hands ballast its communicator. The library is
// found and checked as backend plugins are, in the same folders
// (plugin_search_paths(): BALLAST_PLUGIN_PATH, set_plugin_search_path's,
// then beside libballast; docs/plugins.md). A library once loaded stays the
// one used for the life of the process. "local" is
// refused here (its ranks are threads: make_local_communicators).
// Errors: invalid_argument (a bad string), not_found (no such library,
// with the folders searched), abi_mismatch, and the library's own.
Result<std::unique_ptr<Communicator>> open_communicator(std::string_view config, void* native = nullptr);

// Where open_communicator would find the library for `name` ("mpi", "nccl"),
// found and checked but not loaded (`ballast backends` lists it); once
// loaded, the file it was loaded from (a loaded library stays the one used
// after set_plugin_search_path, as backend plugins do):
// not_found with the folders searched; invalid_argument for "local" and
// names that cannot be a library's.
Result<std::string> find_communicator(std::string_view name);

}  // namespace ballast

BALLAST_API_END
