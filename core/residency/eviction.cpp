#include "residency/eviction.hpp"

namespace ballast::residency {

bool evictable_now(const Entry& e) noexcept { return e.state == Entry::State::resident && e.evictable && e.pins == 0; }

namespace {

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
    if (!evictable_now(*e)) continue;
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

// ---------------------------------------------------------------- EvictionIndex

#include <ext/pb_ds/assoc_container.hpp>
#include <ext/pb_ds/tree_policy.hpp>

#include <functional>
#include <set>
#include <tuple>

namespace ballast::residency {
// Named, not anonymous: EvictionIndex::Sets, a class with linkage, holds
// these types (GCC's -Wsubobject-linkage, where a unity build includes
// this file).
namespace eviction_sets {

// The sets an entry may be filed in: one at a time.
enum : int { kNone = 0, kUnrequested = 1, kPrefetched = 2, kRequested = 3 };

// (key, seq, entry): seq breaks ties as the creation-order scan does.
using UseKey = std::tuple<std::uint64_t, std::uint64_t, Entry*>;     // last_use ascending
using LoadedKey = std::tuple<std::uint64_t, std::uint64_t, Entry*>;  // loaded_at descending (negated order below)
struct NewestFirst {
  bool operator()(const LoadedKey& a, const LoadedKey& b) const noexcept {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
    return std::get<1>(a) < std::get<1>(b);
  }
};

// (bytes, loaded_at, seq, entry), ordered by bytes: each node also keeps the
// newest loaded_at of its subtree, so "the newest entry no larger than N"
// and "the newest entry larger than N" are one walk down the tree each.
using SizeKey = std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, Entry*>;

template <class NodeCIt, class NodeIt, class Cmp, class Alloc>
struct NewestInSubtree {
  // (loaded_at, -seq) of the newest: the larger wins; on equal loaded_at
  // the entry created first.
  using metadata_type = std::pair<std::uint64_t, std::uint64_t>;
  void operator()(NodeIt it, NodeCIt end) {
    metadata_type best = {std::get<1>(**it), ~std::get<2>(**it)};
    NodeIt l = it.get_l_child(), r = it.get_r_child();
    if (l != end) best = std::max(best, l.get_metadata());
    if (r != end) best = std::max(best, r.get_metadata());
    const_cast<metadata_type&>(it.get_metadata()) = best;
  }
  virtual NodeCIt node_begin() const = 0;
  virtual NodeCIt node_end() const = 0;
  virtual ~NewestInSubtree() = default;
};

using SizeTree = __gnu_pbds::tree<SizeKey, __gnu_pbds::null_type, std::less<SizeKey>, __gnu_pbds::rb_tree_tag,
                                  NewestInSubtree>;
using Meta = std::pair<std::uint64_t, std::uint64_t>;

Meta meta_of(const SizeKey& k) { return {std::get<1>(k), ~std::get<2>(k)}; }

// The newest entry of `tree` whose bytes are <= limit (at_most) or > limit:
// one walk down from the root, which passes O(log n) nodes inside the range
// and the subtrees wholly inside it (their maxima are kept), then one walk
// down the best such subtree to the node that holds its maximum.
Entry* newest(const SizeTree& tree, std::uint64_t limit, bool at_most) noexcept {
  using NodeIt = SizeTree::node_const_iterator;
  const NodeIt end = tree.node_end();
  bool any = false;
  Meta best{0, 0};
  const SizeKey* best_node = nullptr;  // a single node holding `best`, or
  NodeIt best_subtree = end;           // a subtree whose maximum is `best`
  for (NodeIt node = tree.node_begin(); node != end;) {
    const SizeKey& key = **node;
    const bool inside = at_most ? std::get<0>(key) <= limit : std::get<0>(key) > limit;
    if (!inside) {
      node = at_most ? node.get_l_child() : node.get_r_child();
      continue;
    }
    if (!any || meta_of(key) > best) {
      best = meta_of(key);
      best_node = &key;
      best_subtree = end;
      any = true;
    }
    // Keys are ordered by bytes first: everything on the near side of an
    // inside node is inside too.
    const NodeIt whole = at_most ? node.get_l_child() : node.get_r_child();
    if (whole != end && whole.get_metadata() > best) {
      best = whole.get_metadata();
      best_node = nullptr;
      best_subtree = whole;
    }
    node = at_most ? node.get_r_child() : node.get_l_child();
  }
  if (!any) return nullptr;
  if (best_node != nullptr) return std::get<3>(*best_node);
  for (NodeIt node = best_subtree;;) {
    if (meta_of(**node) == best) return std::get<3>(**node);
    const NodeIt l = node.get_l_child();
    node = (l != end && l.get_metadata() == best) ? l : node.get_r_child();
  }
}

}  // namespace eviction_sets

struct EvictionIndex::Sets {
  std::set<eviction_sets::UseKey> unrequested;  // class 1: by last_use
  std::set<eviction_sets::LoadedKey, eviction_sets::NewestFirst>
      prefetched;                                    // class 4 of the header (5 in class_of): newest first
  std::set<eviction_sets::UseKey> requested_by_use;  // the rest: staleness (class 2) by last_use...
  eviction_sets::SizeTree requested_by_size;         // ...and classes 3/4 by size, newest first
};

EvictionIndex::EvictionIndex() : sets_(std::make_unique<Sets>()) {}
EvictionIndex::~EvictionIndex() = default;

std::size_t EvictionIndex::size() const noexcept {
  return sets_->unrequested.size() + sets_->prefetched.size() + sets_->requested_by_use.size();
}

void EvictionIndex::erase(Entry& e) noexcept {
  Sets& s = *sets_;
  switch (e.filed_in) {
    case eviction_sets::kUnrequested: s.unrequested.erase({e.filed_use, e.seq, &e}); break;
    case eviction_sets::kPrefetched: s.prefetched.erase({e.filed_loaded, e.seq, &e}); break;
    case eviction_sets::kRequested:
      s.requested_by_use.erase({e.filed_use, e.seq, &e});
      s.requested_by_size.erase({e.filed_bytes, e.filed_loaded, e.seq, &e});
      break;
    default: break;
  }
  e.filed_in = eviction_sets::kNone;
}

void EvictionIndex::update(Entry& e) {
  erase(e);
  if (!evictable_now(e)) return;
  Sets& s = *sets_;
  // Filed before the keys are recorded: an insertion that throws leaves the
  // entry unfiled (and not half in two sets).
  if (!e.requested) {
    s.unrequested.insert({e.last_use, e.seq, &e});
    e.filed_in = eviction_sets::kUnrequested;
  } else if (e.awaiting_use) {
    s.prefetched.insert({e.loaded_at, e.seq, &e});
    e.filed_in = eviction_sets::kPrefetched;
  } else {
    s.requested_by_use.insert({e.last_use, e.seq, &e});
    try {
      s.requested_by_size.insert({e.bytes(), e.loaded_at, e.seq, &e});
    } catch (...) {
      s.requested_by_use.erase({e.last_use, e.seq, &e});
      throw;
    }
    e.filed_in = eviction_sets::kRequested;
  }
  e.filed_use = e.last_use;
  e.filed_loaded = e.loaded_at;
  e.filed_bytes = e.bytes();
}

Entry* EvictionIndex::choose(const EvictionClock& clock, Requester who, std::uint64_t request_bytes) const noexcept {
  const Sets& s = *sets_;
  if (!s.unrequested.empty()) return std::get<2>(*s.unrequested.begin());
  if (!s.requested_by_use.empty()) {
    // Stale is monotone in last_use: if the least recently used is not
    // stale, none is.
    Entry* oldest = std::get<2>(*s.requested_by_use.begin());
    if (class_of(*oldest, clock, request_bytes) == 2) return oldest;
    if (Entry* e = eviction_sets::newest(s.requested_by_size, request_bytes, true)) return e;
    if (Entry* e = eviction_sets::newest(s.requested_by_size, request_bytes, false)) return e;
  }
  if (who == Requester::demand && !s.prefetched.empty()) return std::get<2>(*s.prefetched.begin());
  return nullptr;
}

}  // namespace ballast::residency
