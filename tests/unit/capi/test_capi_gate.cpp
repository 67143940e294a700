// capi::Gate, the residency handle's lock (core/capi/gate.hpp): a use
// waits behind a waiting release (glibc's std::shared_mutex lets it pass,
// so a stream of uses could hold a release off for ever), an unpin passes
// it (a use inside may be waiting for that unpin's room), and nothing
// shares the gate while a release holds it.
#include "capi/gate.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>

using ballast::capi::Gate;
using ballast::capi::PassingLock;
using namespace std::chrono_literals;

namespace {

// Spins until `flag` or 5 s; true if it came.
bool eventually(const std::atomic<bool>& flag) {
  for (auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;)
    if (flag.load())
      return true;
    else
      std::this_thread::sleep_for(1ms);
  return flag.load();
}

// A new use and an unpin, each on a thread of its own, each setting its
// flag once it is inside the gate.
std::thread use_of(Gate& gate, std::atomic<bool>& inside) {
  return std::thread([&gate, &inside] {
    std::shared_lock lock(gate);
    inside = true;
  });
}
std::thread unpin_of(Gate& gate, std::atomic<bool>& inside) {
  return std::thread([&gate, &inside] {
    PassingLock lock(gate);
    inside = true;
  });
}

}  // namespace

TEST_CASE("gate: a release waits for the uses inside; a new use waits behind it; an unpin passes it") {
  Gate gate;
  std::shared_lock inside(gate);  // a pin_group waiting for room
  std::atomic<bool> released{false}, used{false}, unpinned{false};
  std::thread release([&] {
    std::unique_lock lock(gate);
    released = true;
  });
  // The release is waiting (no way to observe it but time: give it a moment).
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(released.load());
  std::thread use = use_of(gate, used);
  std::thread unpin = unpin_of(gate, unpinned);
  CHECK(eventually(unpinned));  // the unpin that makes the room is not held behind the release
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(used.load());  // the new use waits: the release is not starved
  CHECK_FALSE(released.load());
  inside.unlock();  // the pin_group got its room and returned
  release.join();
  use.join();
  unpin.join();
  CHECK(released.load());
  CHECK(used.load());
}

TEST_CASE("gate: nothing shares it while a release holds it") {
  Gate gate;
  std::unique_lock release(gate);
  std::atomic<bool> used{false}, unpinned{false};
  std::thread use = use_of(gate, used);
  std::thread unpin = unpin_of(gate, unpinned);
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(used.load());
  CHECK_FALSE(unpinned.load());
  release.unlock();
  use.join();
  unpin.join();
  CHECK(used.load());
  CHECK(unpinned.load());
}
