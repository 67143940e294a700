// Which resident entry to evict when a page-in needs room: the policy, as
// a pure function over the entries, so it is tested on its own.
//
// An engine's decode loop walks the same weights in the same order every
// token: a cyclic scan. Plain LRU is the worst policy for it (once the
// budget is below the working set, every entry is evicted just before it
// is needed again, so every token pages in the whole model). This policy
// keeps a stable resident set and streams the rest through the newest
// slots, in this order of preference:
//   1. sources loaded only to build a derivation (never asked for
//      directly): dead weight once their derivation exists; the least
//      recently used first;
//   2. stale entries, not used for two whole cycles of the engine's
//      requests (a model phase that has ended); least recently used first;
//   3. the rest, the most recently LOADED first: the first entries loaded
//      stay (the stable set), later ones stream through. Among these, an
//      entry no larger than the request goes before a larger one: a large
//      entry evicted to make room for a small one would be paged in again
//      in full, while swapping like for like keeps the large ones in the
//      stable set and streams only small ones (on a decode loop with one
//      lm_head eight times a layer matrix, this takes the overshoot over
//      the minimum from one lm_head to about one layer matrix);
//   4. only for a demand load, never for a prefetch: entries prefetched
//      but not used yet, the newest first (prefetches are queued in walk
//      order, so the newest is needed last; evicting the oldest would
//      evict the very next entry the engine asks for).
// Pinned entries, entries being loaded and non-evictable (upload) entries
// are never candidates. Sources and derived values are otherwise treated
// alike: a derived value costs its source's page-in plus a kernel to
// rebuild, which class 1 already accounts for.
#pragma once

#include "residency/entry.hpp"

#include <cstdint>
#include <memory>
#include <span>

namespace ballast::residency {

struct EvictionClock {
  std::uint64_t now = 0;              // the use clock
  std::uint64_t distinct_entries = 0; // entries the engine has asked for (one cycle of uses)
};

enum class Requester : std::uint8_t { demand, prefetch };

// Whether `e` may be evicted now: resident, evictable, unpinned (the
// candidates every choice below is made among).
bool evictable_now(const Entry& e) noexcept;

// The entry to evict next to make room for `request_bytes`, or nullptr
// when none may be: the policy as a scan of every entry (O(n)), the
// reference EvictionIndex is tested against.
Entry* choose_victim(std::span<Entry* const> resident, const EvictionClock& clock, Requester who,
                     std::uint64_t request_bytes) noexcept;

// The same choice in O(log n): the candidates (resident, evictable,
// unpinned) kept in ordered structures per class, updated whenever a field
// the policy reads changes. Ties go to the entry created first (Entry::seq),
// as in the scan over entries in creation order. Residency calls update()
// with its lock held after every such change; choose() == choose_victim()
// over the same entries, always (tests/unit/residency).
class EvictionIndex {
 public:
  EvictionIndex();
  ~EvictionIndex();
  EvictionIndex(const EvictionIndex&) = delete;
  EvictionIndex& operator=(const EvictionIndex&) = delete;

  // Re-files `e` after its state, pins, requested, awaiting_use, last_use,
  // loaded_at or size changed (inserts, moves or removes it).
  void update(Entry& e);
  // Removes `e` (before it is destroyed).
  void erase(Entry& e) noexcept;
  Entry* choose(const EvictionClock& clock, Requester who, std::uint64_t request_bytes) const noexcept;
  std::size_t size() const noexcept;

 private:
  struct Sets;
  std::unique_ptr<Sets> sets_;
};

}  // namespace ballast::residency
