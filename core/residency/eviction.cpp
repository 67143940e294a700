#include "residency/eviction.hpp"

namespace ballast::residency {
namespace {

bool candidate(const Entry& e) noexcept {
  return e.state == Entry::State::resident && e.evictable && e.pins == 0;
}

// Classes in order of eviction; 3 and 4 are the rest, no larger and
// larger than the request.
int class_of(const Entry& e, const EvictionClock& clock, std::uint64_t request_bytes) noexcept {
  if (!e.requested) return 1;
  if (e.awaiting_use) return 5;
  // Two cycles, not one: a cyclic walk uses each entry exactly once per
  // cycle, plus the odd extra use (a prefetch, a retry).
  if (clock.now > e.last_use && clock.now - e.last_use > 2 * clock.distinct_entries) return 2;
  return e.bytes() <= request_bytes ? 3 : 4;
}

// Whether `a` goes before `b` within their class.
bool sooner(const Entry& a, const Entry& b, int cls) noexcept {
  switch (cls) {
    case 1:
    case 2: return a.last_use < b.last_use;
    case 3:
    case 4: return a.loaded_at > b.loaded_at;
    // Prefetches run in walk order: the newest is needed last.
    default: return a.loaded_at > b.loaded_at;
  }
}

}  // namespace

Entry* choose_victim(std::span<Entry* const> resident, const EvictionClock& clock, Requester who,
                     std::uint64_t request_bytes) noexcept {
  Entry* best = nullptr;
  int best_class = 6;
  for (Entry* e : resident) {
    if (!candidate(*e)) continue;
    const int cls = class_of(*e, clock, request_bytes);
    if (cls == 5 && who == Requester::prefetch) continue;
    if (cls < best_class || (cls == best_class && sooner(*e, *best, cls))) {
      best = e;
      best_class = cls;
    }
  }
  return best;
}

}  // namespace ballast::residency
