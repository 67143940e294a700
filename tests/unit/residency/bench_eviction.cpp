// Issue 24 §5: time per eviction against the number of entries, for the
// index Residency uses (EvictionIndex, O(log n)) beside the policy's scan
// (choose_victim, O(n)), in one run. A decode loop's cyclic walk over N
// tiny entries under a budget of N/2: every pin past the first token
// evicts one entry and loads one. The index's time per eviction should be
// flat from 1k to 100k entries (a log factor); the scan's grows with N.
//
//   build/bench/bin/bench_eviction  (tools/dev bench runs it)
#include "residency/eviction.hpp"

#include <benchmark/benchmark.h>

#include <deque>
#include <vector>

using namespace ballast::residency;

namespace {

template <bool kIndexed>
void cyclic_walk(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::deque<Entry> entries;
  std::vector<Entry*> all;
  EvictionIndex index;
  EvictionClock clock;
  std::uint64_t load_clock = 0, held = 0;
  const std::uint64_t budget = n / 2;
  for (std::size_t i = 0; i < n; ++i) {
    Entry& e = entries.emplace_back();
    e.first_bytes = 1;
    e.seq = i;
    e.requested = true;
    all.push_back(&e);
  }
  clock.distinct_entries = n;
  std::size_t next = 0;
  std::uint64_t evictions = 0;
  for (auto _ : state) {
    Entry& e = entries[next];
    next = (next + 1) % n;
    if (e.state != Entry::State::resident) {
      while (held + 1 > budget) {
        Entry* v = kIndexed ? index.choose(clock, Requester::demand, 1) : choose_victim(all, clock, Requester::demand, 1);
        if (v == nullptr) state.SkipWithError("no victim");
        v->state = Entry::State::absent;
        index.update(*v);
        --held;
        ++evictions;
      }
      e.state = Entry::State::resident;
      e.loaded_at = ++load_clock;
      ++held;
    }
    e.last_use = ++clock.now;
    index.update(e);
  }
  state.counters["evictions"] = static_cast<double>(evictions);
  state.counters["ns_per_eviction"] = benchmark::Counter(static_cast<double>(evictions),
                                                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(cyclic_walk<true>)->Name("eviction/index")->RangeMultiplier(10)->Range(1000, 100000);
BENCHMARK(cyclic_walk<false>)->Name("eviction/scan")->RangeMultiplier(10)->Range(1000, 100000);
BENCHMARK_MAIN();
