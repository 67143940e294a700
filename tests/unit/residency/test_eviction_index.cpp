// Issue 24 §5: EvictionIndex chooses exactly what the O(n) scan of the
// policy (choose_victim) chooses, in O(log n). A randomized differential
// test over every field the policy reads: states, pins, requested,
// prefetched-and-unused, uses, loads and sizes, under both requesters and
// request sizes around the entries' own.
#include "residency/eviction.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <random>
#include <vector>

using namespace ballast::residency;

namespace {

struct World {
  std::deque<Entry> entries;
  std::vector<Entry*> all;
  EvictionIndex index;
  EvictionClock clock;
  std::uint64_t load_clock = 0;

  void add(std::uint64_t bytes, bool evictable) {
    Entry& e = entries.emplace_back();
    e.first_bytes = bytes;
    e.evictable = evictable;
    e.seq = all.size();
    all.push_back(&e);
  }
};

}  // namespace

TEST_CASE("the eviction index chooses what the scan chooses, through random histories") {
  for (unsigned seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    World w;
    const std::size_t n = 5 + rng() % 120;
    const std::uint64_t sizes[] = {1, 2, 3, 8, 8, 8, 32, 100};
    for (std::size_t i = 0; i < n; ++i) w.add(sizes[rng() % std::size(sizes)], rng() % 10 != 0);
    for (int step = 0; step < 3000; ++step) {
      Entry& e = *w.all[rng() % n];
      switch (rng() % 8) {
        case 0:  // load (or reload)
          if (e.state != Entry::State::resident) {
            e.state = Entry::State::resident;
            e.loaded_at = ++w.load_clock;
          }
          break;
        case 1: e.state = Entry::State::absent; e.awaiting_use = false; break;       // evicted
        case 2: e.state = Entry::State::loading; break;
        case 3: ++e.pins; break;
        case 4: if (e.pins > 0) --e.pins; break;
        case 5:  // pinned by the engine: a use
          if (!e.requested) {
            e.requested = true;
            ++w.clock.distinct_entries;
          }
          e.last_use = ++w.clock.now;
          e.awaiting_use = false;
          break;
        case 6:  // prefetched
          if (!e.requested) {
            e.requested = true;
            ++w.clock.distinct_entries;
          }
          if (e.state == Entry::State::resident) e.awaiting_use = true;
          break;
        default: w.clock.now += rng() % 50; break;  // time passes (entries go stale)
      }
      w.index.update(e);
      if (step % 7 == 0) {
        for (Requester who : {Requester::demand, Requester::prefetch}) {
          const std::uint64_t request = sizes[rng() % std::size(sizes)] + (rng() % 3) - 1;
          Entry* scan = choose_victim(w.all, w.clock, who, request);
          Entry* fast = w.index.choose(w.clock, who, request);
          REQUIRE_MESSAGE(scan == fast, "step " << step << " request " << request << ": scan chose "
                                                << (scan ? scan->seq : 999999) << ", index "
                                                << (fast ? fast->seq : 999999));
        }
      }
    }
    for (Entry* e : w.all) w.index.erase(*e);
    CHECK(w.index.size() == 0);
  }
}

TEST_CASE("the index holds only candidates: pinned, loading, absent and upload entries are never chosen") {
  World w;
  w.add(8, true);
  w.add(8, false);  // upload: not evictable
  Entry& a = *w.all[0];
  Entry& up = *w.all[1];
  for (Entry* e : w.all) {
    e->state = Entry::State::resident;
    e->loaded_at = ++w.load_clock;
    w.index.update(*e);
  }
  CHECK(w.index.size() == 1);
  CHECK(w.index.choose(w.clock, Requester::demand, 8) == &a);
  ++a.pins;
  w.index.update(a);
  CHECK(w.index.choose(w.clock, Requester::demand, 8) == nullptr);
  --a.pins;
  a.state = Entry::State::loading;
  w.index.update(a);
  CHECK(w.index.choose(w.clock, Requester::demand, 8) == nullptr);
  static_cast<void>(up);
}
