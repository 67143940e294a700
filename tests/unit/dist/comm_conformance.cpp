// comm_conformance CONFIG [--then-fail | --late-rank]: what the cooperative load asks of a
// communicator library, checked on a real one, every rank of a job
// running it (mpirun -np N comm_conformance mpi; comm_conformance nccl at
// world 1 on a GPU machine, tools/gpu-check). Exit 0: every check held;
// 1: one failed (printed); 77: the communicator does not open here
// (printed as "skipped: <why>"), e.g. nccl without a GPU.
//
// Checks: rank and world; rounds of exchange with sizes that differ by
// sender, receiver and round (0 bytes, odd sizes, 3 MiB) and every
// rank's buffer to itself; messages both ways where the library has them
// (any_source); the barrier; with --then-fail, after fail(), a refusal,
// not a hang (not for mpi: a failed MPI rank does not finalize, by design,
// and mpirun calls that job failed).
//
// --late-rank: after the checks, the last rank stays away from an
// exchange round and a barrier that the others enter with a 5 s deadline
// each (wide: the others must not miss each other on a loaded machine);
// they must fail both, naming that rank and no other ("the barrier names
// the late rank N"). The job then counts as failed (its ranks do not
// finalize), so its test reads the printed lines, not the exit code.
#include <ballast/communicator.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

using namespace ballast;
using namespace std::chrono_literals;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what.c_str());
    ++failures;
  }
}

std::vector<std::byte> pattern(std::uint32_t from, std::uint32_t to, std::uint32_t round) {
  static const std::size_t sizes[] = {0, 1, 7, 4096, 3u << 20, 255};
  std::vector<std::byte> b(sizes[(from * 3 + to * 5 + round) % 6]);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::byte((from * 131 + to * 17 + round * 7 + i) & 0xff);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string config = argc > 1 ? argv[1] : "mpi";
  const bool then_fail = argc > 2 && std::string(argv[2]) == "--then-fail";
  const bool late_rank = argc > 2 && std::string(argv[2]) == "--late-rank";
  auto opened = open_communicator(config);
  if (!opened) {
    const ErrorCode code = opened.error().code;
    if (code == ErrorCode::unavailable || code == ErrorCode::not_found) {
      std::printf("skipped: %s\n", opened.error().to_string().c_str());
      return 77;
    }
    std::printf("FAILED: %s\n", opened.error().to_string().c_str());
    return 1;
  }
  Communicator& comm = **opened;
  const std::uint32_t me = comm.rank(), n = comm.world();
  const std::string who = comm.name() + " rank " + std::to_string(me) + " of " + std::to_string(n);
  check(me < n, who + ": rank inside the world");
  const auto deadline = [] { return std::chrono::steady_clock::now() + 60s; };

  for (std::uint32_t round = 0; round < 6; ++round) {
    std::vector<std::vector<std::byte>> to;
    for (std::uint32_t q = 0; q < n; ++q) to.push_back(pattern(me, q, round));
    auto from = comm.exchange(std::move(to), deadline());
    if (!from) {
      check(false, who + ": exchange round " + std::to_string(round) + ": " + from.error().to_string());
      break;
    }
    check(from->size() == n, who + ": a buffer per rank");
    for (std::uint32_t p = 0; p < n && p < from->size(); ++p)
      check((*from)[p] == pattern(p, me, round),
            who + ": round " + std::to_string(round) + ", rank " + std::to_string(p) + "'s buffer");
  }
  check(!comm.exchange({}, deadline()).ok(), who + ": an exchange without a buffer per rank is refused");

  if (comm.any_source() && n > 1) {
    // A message to the next rank, one from the previous: order and sender kept.
    const std::uint32_t next = (me + 1) % n, previous = (me + n - 1) % n;
    for (std::uint32_t i = 0; i < 3; ++i) check(comm.send(next, pattern(me, next, 10 + i)).ok(), who + ": send");
    for (std::uint32_t i = 0; i < 3; ++i) {
      auto m = comm.receive(deadline());
      check(m.ok() && m->has_value() && (*m)->from == previous && (*m)->bytes == pattern(previous, me, 10 + i),
            who + ": message " + std::to_string(i) + " from rank " + std::to_string(previous));
    }
  } else if (!comm.any_source()) {
    check(comm.send(0, {}).error().code == ErrorCode::unsupported, who + ": send refused as unsupported (rounds only)");
  }
  const Status barrier = comm.barrier(deadline());
  check(barrier.ok(), who + ": barrier: " + barrier.to_string());
  if (then_fail) {
    // After the last barrier, every rank fails itself: no later call hangs.
    comm.fail(make_error(ErrorCode::io, "conformance: failing on purpose"));
    const auto started = std::chrono::steady_clock::now();
    const Status after = comm.barrier(std::chrono::steady_clock::now() + 5s);
    check(!after.ok(), who + ": a barrier after fail() is refused");
    check(std::chrono::steady_clock::now() - started < 10s, who + ": ... within its deadline");
  }

  if (late_rank && n > 1) {
    const std::uint32_t late = n - 1;
    if (me == late) {
      std::this_thread::sleep_for(12s);  // past the others' deadlines (5 s + 5 s)
    } else {
      // An exchange round first: it too names the late rank, and only it
      // (the others' buffers came).
      std::vector<std::vector<std::byte>> to(n);
      auto round = comm.exchange(std::move(to), std::chrono::steady_clock::now() + 5s);
      const std::string said = round.ok() ? "ok" : round.error().to_string();
      const bool only_late = !round.ok() && said.find("rank(s) " + std::to_string(late)) != std::string::npos &&
                             said.find("rank(s) " + std::to_string(late) + ",") == std::string::npos &&
                             said.find(", " + std::to_string(late)) == std::string::npos;
      check(only_late, who + ": an exchange rank " + std::to_string(late) + " stays away from fails naming it alone (got " +
                           said + ")");
      const Status missed = comm.barrier(std::chrono::steady_clock::now() + 5s);
      const std::string text = missed.ok() ? "ok" : missed.error().to_string();
      const bool named = !missed.ok() && text.find("rank(s) " + std::to_string(late)) != std::string::npos;
      check(named, who + ": a barrier rank " + std::to_string(late) + " stays away from fails naming it (got " + text + ")");
      if (named) std::printf("%s: the barrier names the late rank %u\n", who.c_str(), late);
    }
  }

  std::printf("%s: %s\n", who.c_str(), failures == 0 ? "every check held" : "checks failed");
  return failures == 0 ? 0 : 1;
}
