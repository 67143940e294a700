// The eviction policy on its own (core/residency/eviction.hpp): a decode
// loop's cyclic walk pages in little more than the minimum where plain LRU
// would page in everything; a finished phase goes stale and is evicted
// first; dependency-only entries go before anything asked for; pinned
// entries never go; a prefetch never evicts another prefetch.
#include "residency/eviction.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <vector>

using namespace ballast::residency;

namespace {

// Entries of one byte each under a budget of `budget` bytes, loaded the
// way Residency loads them.
struct Sim {
  std::deque<Entry> entries;
  std::vector<Entry*> all;
  EvictionClock clock;
  std::uint64_t load_clock = 0;
  std::uint64_t held = 0;
  std::uint64_t budget;
  std::uint64_t loads = 0;

  Sim(std::size_t n, std::uint64_t b) : budget(b) {
    for (std::size_t i = 0; i < n; ++i) {
      entries.emplace_back().first_bytes = 1;
      all.push_back(&entries.back());
    }
  }
  explicit Sim(const std::vector<std::uint64_t>& sizes) : budget(0) {
    for (std::uint64_t size : sizes) {
      entries.emplace_back().first_bytes = size;
      all.push_back(&entries.back());
    }
  }
  bool load(Entry& e, Requester who = Requester::demand) {
    while (held + e.bytes() > budget) {
      Entry* v = choose_victim(all, clock, who, e.bytes());
      if (v == nullptr) return false;
      v->state = Entry::State::absent;
      held -= v->bytes();
    }
    e.state = Entry::State::resident;
    e.loaded_at = ++load_clock;
    held += e.bytes();
    ++loads;
    return true;
  }
  // An engine's pin and unpin of entry i.
  void use(std::size_t i) {
    Entry& e = entries[i];
    if (!e.requested) {
      e.requested = true;
      ++clock.distinct_entries;
    }
    if (e.state != Entry::State::resident) REQUIRE(load(e));
    e.last_use = ++clock.now;
    e.awaiting_use = false;
  }
  std::uint64_t token(std::size_t first, std::size_t count) {
    const std::uint64_t before = loads;
    for (std::size_t i = first; i < first + count; ++i) use(i);
    return loads - before;
  }
  // Bytes loaded by one pass over every entry.
  std::uint64_t token_bytes() {
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].state != Entry::State::resident) bytes += entries[i].bytes();
      use(i);
    }
    return bytes;
  }
};

}  // namespace

TEST_CASE("a cyclic walk larger than the budget pages in about the minimum, every token") {
  for (std::uint64_t budget : {5u, 10u, 15u, 19u}) {
    CAPTURE(budget);
    Sim sim(20, budget);
    CHECK(sim.token(0, 20) == 20);
    for (int t = 0; t < 8; ++t) {
      const std::uint64_t paged = sim.token(0, 20);
      // The minimum is 20 - budget; plain LRU pages in all 20.
      CHECK(paged <= 20 - budget + 1);
      CHECK(paged >= 20 - budget);
    }
  }
}

TEST_CASE("a decode loop with one large entry streams small entries, not the large one") {
  // 140 layer matrices of 32 units, then an lm_head of 262: paging only the
  // minimum would need the lm_head kept resident; streaming it instead costs
  // 262 - 32 more every token.
  std::vector<std::uint64_t> sizes(140, 32);
  sizes.push_back(262);
  std::uint64_t total = 0;
  for (std::uint64_t s : sizes) total += s;
  for (int pct : {25, 50, 90}) {
    CAPTURE(pct);
    Sim sim(sizes);
    sim.budget = total * static_cast<std::uint64_t>(pct) / 100;
    const std::uint64_t minimum = total - sim.budget;
    sim.token_bytes();
    for (int t = 0; t < 5; ++t) {
      const std::uint64_t paged = sim.token_bytes();
      CHECK(paged >= minimum);
      CHECK(paged <= minimum + 2 * 32);
    }
  }
}

TEST_CASE("a walk that fits pages in nothing after the first token") {
  Sim sim(20, 20);
  CHECK(sim.token(0, 20) == 20);
  CHECK(sim.token(0, 20) == 0);
  CHECK(sim.token(0, 20) == 0);
}

TEST_CASE("a finished phase goes stale and makes room for the next one's stable set") {
  Sim sim(20, 10);
  for (int t = 0; t < 3; ++t) sim.token(0, 10);  // phase A: entries 0..9, all resident
  CHECK(sim.token(0, 10) == 0);
  std::uint64_t last = 0;
  for (int t = 0; t < 6; ++t) last = sim.token(10, 10);  // phase B: 10..19, same size as the budget
  CHECK(last == 0);  // B is wholly resident: A went, as it stopped being used
  for (std::size_t i = 0; i < 10; ++i) CHECK(sim.entries[i].state == Entry::State::absent);
}

TEST_CASE("entries loaded only to build another go first; pinned entries never") {
  Sim sim(4, 4);
  Entry& dependency = sim.entries[3];
  REQUIRE(sim.load(dependency));  // a source paged in for a derivation, never asked for itself
  for (std::size_t i = 0; i < 3; ++i) sim.use(i);  // loaded after it
  CHECK(choose_victim(sim.all, sim.clock, Requester::demand, 1) == &dependency);
  dependency.pins = 1;
  Entry* v = choose_victim(sim.all, sim.clock, Requester::demand, 1);
  CHECK(v != &dependency);
  CHECK(v == &sim.entries[2]);  // then the most recently loaded of the rest
  for (Entry& e : sim.entries) e.pins = 1;
  CHECK(choose_victim(sim.all, sim.clock, Requester::demand, 1) == nullptr);
}

TEST_CASE("a prefetch never evicts an entry prefetched and not yet used; a demand load may") {
  Sim sim(3, 3);
  sim.use(0);
  for (std::size_t i = 1; i < 3; ++i) {
    Entry& e = sim.entries[i];
    e.requested = true;
    REQUIRE(sim.load(e, Requester::prefetch));
    e.awaiting_use = true;
  }
  sim.entries[0].pins = 1;  // in use
  CHECK(choose_victim(sim.all, sim.clock, Requester::prefetch, 1) == nullptr);
  CHECK(choose_victim(sim.all, sim.clock, Requester::demand, 1) == &sim.entries[2]);  // the newest: needed last
}

TEST_CASE("non-evictable (upload) entries and entries being loaded are never chosen") {
  Sim sim(2, 2);
  sim.use(0);
  sim.use(1);
  sim.entries[0].evictable = false;
  sim.entries[1].state = Entry::State::loading;
  CHECK(choose_victim(sim.all, sim.clock, Requester::demand, 1) == nullptr);
}
