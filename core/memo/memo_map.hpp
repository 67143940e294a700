// MemoMap<V>: the memo of ONE derivation, sharded by key, with single-flight
// builds. DerivedWeights holds one per derivation.
//
// Why this shape: a hit is on the path of every layer of every forward
// pass, from many threads at once, so a hit writes to no cache line that
// another thread also writes. Even a shared_mutex fails that: taking it for
// reading is a write to the lock word, and two threads hitting keys in the
// same shard bounce that line between their cores. So:
//   - Memoized values live in an append-only open-addressing table per
//     shard. A slot is written once, then published with a release store of
//     its state; readers probe without any lock (acquire loads). The table
//     only grows: a bigger copy is published and the old one is retired, not
//     freed, until the map is destroyed, so a reader still probing it stays
//     safe. (Old tables sum to less than the live one.)
//   - Everything that changes the map (insert, starting and finishing a
//     build, release) takes the shard's mutex. Shards keep unrelated first
//     touches from queueing on one mutex; builds run with no lock held.
//   - Hit and miss counters are per thread (hit_counters.hpp).
#pragma once

#include <ballast/derived_weights.hpp>

#include "base/hex.hpp"
#include "memo/hit_counters.hpp"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ballast::memo {


// A full 64-bit mix (murmur3's finaliser) spreads every input bit over the
// hash: the top bits pick the shard, the low bits the table slot.
constexpr std::uint64_t mix(std::uint64_t k) noexcept {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// Pointers are aligned, so their low bits say little. Each field is
// multiplied by its own odd constant (independent multiplies, issued in
// parallel) and the sum goes through one mix: a hit pays for one mix, not
// one per field.
inline std::uint64_t hash_key(const DerivationKey& k) noexcept {
  // src_type in 16 bits: GGUF block types are numbered from 2000.
  const std::uint64_t small = std::uint64_t{k.block_size} | (std::uint64_t{static_cast<std::uint16_t>(k.src_type)} << 32) |
                              (std::uint64_t{static_cast<std::uint8_t>(k.zero_points)} << 48);
  return mix(k.source * 0x9e3779b97f4a7c15ull + k.scales * 0xc2b2ae3d27d4eb4full +
             k.zero_point * 0x165667b19e3779f9ull + k.rows * 0x27d4eb2f165667c5ull + k.cols * 0x94d049bb133111ebull +
             small * 0xbf58476d1ce4e5b9ull + k.src_cols * 0x2545f4914f6cdd1dull + k.col_offset * 0x9fb21c651e98df25ull);
}

// An out_of_memory error whose message fits std::string's inline buffer:
// making it allocates nothing, so it can be reported when nothing else can.
inline Error oom_error() noexcept {
  Error e;
  e.code = ErrorCode::out_of_memory;
  e.message = "host memory";
  return e;
}

struct KeyHash {
  std::size_t operator()(const DerivationKey& k) const noexcept { return static_cast<std::size_t>(hash_key(k)); }
};

// One build in progress; waiters block on it outside the shard lock.
template <class V>
struct Flight {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<V> value;      // set on success
  std::optional<Error> error;  // set on failure
  const std::thread::id builder = std::this_thread::get_id();

  void finish(std::optional<V> v, std::optional<Error> e) {
    {
      std::lock_guard lock(mutex);
      value = std::move(v);
      error = std::move(e);
      done = true;
    }
    done_cv.notify_all();
  }
  void wait() {
    std::unique_lock lock(mutex);
    done_cv.wait(lock, [this] { return done; });
  }
};

template <class V>
class MemoMap {
 public:
  using Value = typename V::value_type;

  // 64 shards: with a dozen threads missing on random keys, two rarely
  // queue on one mutex, and an empty shard costs one cache line.
  static constexpr unsigned kShardBits = 6;
  static constexpr std::size_t kShards = std::size_t{1} << kShardBits;

  MemoMap(Derivation kind, HitCounters& counters) : kind_(kind), counters_(counters) {}
  MemoMap(const MemoMap&) = delete;
  MemoMap& operator=(const MemoMap&) = delete;
  ~MemoMap() {
    for (Shard& s : shards_) delete s.table.load(std::memory_order_relaxed);
  }

  Derivation kind() const noexcept { return kind_; }

  // Public so tests can pick keys that share a shard.
  static std::size_t shard_index(const DerivationKey& key) noexcept { return shard_of(hash_key(key)); }

  // The hot path: no lock, no shared write.
  std::optional<Value> find(const DerivationKey& key) const noexcept {
    const std::uint64_t hash = hash_key(key);
    const V* v = lookup(shards_[shard_of(hash)], key, hash);
    if (v != nullptr) {
      counters_.hit();
      return v->value();
    }
    counters_.miss();
    return std::nullopt;
  }

  Result<Insertion<V>> insert(const DerivationKey& key, const V& value) {
    const std::uint64_t hash = hash_key(key);
    Shard& s = shards_[shard_of(hash)];
    for (;;) {
      std::shared_ptr<Flight<V>> flight;
      {
        std::lock_guard lock(s.mutex);
        if (const V* held = lookup(s, key, hash)) {
          s.rejected.fetch_add(1, std::memory_order_relaxed);
          return Insertion<V>{held->value(), value};
        }
        auto it = s.flights.find(key);
        if (it == s.flights.end()) {
          reserve_locked(s, s.flights.size() + 1);
          publish_locked(s, key, value);
          return Insertion<V>{value.value(), std::nullopt};
        }
        flight = it->second;
      }
      if (flight->builder == std::this_thread::get_id()) return recursion_error(key, "insert into");
      // The builder wins if it succeeds; if it fails there is no entry and
      // the next round stores our value.
      flight->wait();
    }
  }

  template <class Build>
  Result<Value> get_or_build(const DerivationKey& key, Build& build) {
    const std::uint64_t hash = hash_key(key);
    Shard& s = shards_[shard_of(hash)];
    if (const V* v = lookup(s, key, hash)) {
      counters_.hit();
      return v->value();
    }

    std::shared_ptr<Flight<V>> flight;
    bool building = false;
    {
      std::lock_guard lock(s.mutex);
      if (const V* v = lookup(s, key, hash)) {  // finished between our two looks: a hit after all
        counters_.hit();
        return v->value();
      }
      counters_.miss();
      auto it = s.flights.find(key);
      if (it != s.flights.end()) {
        flight = it->second;
        if (flight->builder == std::this_thread::get_id()) return recursion_error(key, "build");
        s.waits.fetch_add(1, std::memory_order_relaxed);
      } else {
        // Room for this value is made now (every flight holds a slot), so a
        // finished build can always be stored without allocating.
        reserve_locked(s, s.flights.size() + 1);
        flight = std::make_shared<Flight<V>>();
        s.flights.emplace(key, flight);  // may throw: nothing is registered then
        s.builds.fetch_add(1, std::memory_order_relaxed);
        building = true;
      }
    }
    if (building) return build_registered(s, key, std::move(flight), build);  // with no lock held
    flight->wait();
    if (flight->error) return *flight->error;  // a copy that fails throws bad_alloc: the caller maps it
    return flight->value->value();
  }

  // Removes every memoized value and hands them back. The emptied tables
  // are retired, not freed, so a (misbehaving) concurrent reader stays
  // memory-safe. Builds still in flight are left alone and land afterwards.
  std::vector<std::pair<DerivationKey, V>> take_all() noexcept {
    std::vector<std::pair<DerivationKey, V>> out;
    for (Shard& s : shards_) {
      std::lock_guard lock(s.mutex);
      Table* t = s.table.load(std::memory_order_relaxed);
      if (t == nullptr) continue;
      try {
        out.reserve(out.size() + s.count.load(std::memory_order_relaxed));
        for (std::size_t i = 0; i <= t->mask; ++i)
          if (t->slots[i].full.load(std::memory_order_relaxed)) out.emplace_back(t->slots[i].key, t->slots[i].value);
      } catch (const std::bad_alloc&) {
        continue;  // leave this shard as it is rather than lose its values
      }
      s.table.store(nullptr, std::memory_order_release);
      Table* oldest = t;
      while (oldest->retired) oldest = oldest->retired.get();
      oldest->retired = std::move(s.retired);
      s.retired.reset(t);
      s.count.store(0, std::memory_order_relaxed);
      s.bytes.store(0, std::memory_order_relaxed);
    }
    return out;
  }

  std::size_t len() const noexcept {
    std::size_t total = 0;
    for (const Shard& s : shards_) total += s.count.load(std::memory_order_relaxed);
    return total;
  }
  std::uint64_t bytes() const noexcept {
    std::uint64_t total = 0;
    for (const Shard& s : shards_) total += s.bytes.load(std::memory_order_relaxed);
    return total;
  }

  void add_stats(DerivedWeightsStats& out) const noexcept {
    for (const Shard& s : shards_) {
      out.builds += s.builds.load(std::memory_order_relaxed);
      out.failed_builds += s.failed_builds.load(std::memory_order_relaxed);
      out.waits += s.waits.load(std::memory_order_relaxed);
      out.rejected_inserts += s.rejected.load(std::memory_order_relaxed);
    }
  }

 private:
  struct Slot {
    std::atomic<bool> full{false};  // released after key and value are written; never cleared
    DerivationKey key{};
    V value{};
  };

  // Power-of-two capacity, linear probing, at most half full. `retired`
  // chains the tables this one replaced (kept for readers still in them).
  struct Table {
    explicit Table(std::size_t capacity) : mask(capacity - 1), slots(new Slot[capacity]) {}
    std::size_t mask;
    std::unique_ptr<Slot[]> slots;
    std::unique_ptr<Table> retired;
  };

  struct alignas(64) Shard {
    std::atomic<Table*> table{nullptr};  // owned; null until the first value
    std::atomic<std::size_t> count{0};   // written under the mutex
    std::atomic<std::uint64_t> bytes{0};  // written under the mutex
    std::mutex mutex;
    std::unordered_map<DerivationKey, std::shared_ptr<Flight<V>>, KeyHash> flights;  // under the mutex
    std::unique_ptr<Table> retired;  // under the mutex
    std::atomic<std::uint64_t> builds{0};
    std::atomic<std::uint64_t> failed_builds{0};
    std::atomic<std::uint64_t> waits{0};
    std::atomic<std::uint64_t> rejected{0};
  };

  static std::size_t shard_of(std::uint64_t hash) noexcept {
    return static_cast<std::size_t>(hash >> (64 - kShardBits));
  }

  static const V* lookup(const Shard& s, const DerivationKey& key, std::uint64_t hash) noexcept {
    const Table* t = s.table.load(std::memory_order_acquire);
    if (t == nullptr) return nullptr;
    for (std::size_t i = static_cast<std::size_t>(hash) & t->mask;; i = (i + 1) & t->mask) {
      const Slot& slot = t->slots[i];
      if (!slot.full.load(std::memory_order_acquire)) return nullptr;
      if (slot.key == key) return &slot.value;
    }
  }

  static void place(Table& t, const DerivationKey& key, const V& value, std::memory_order order) noexcept {
    for (std::size_t i = static_cast<std::size_t>(hash_key(key)) & t.mask;; i = (i + 1) & t.mask) {
      Slot& slot = t.slots[i];
      if (slot.full.load(std::memory_order_relaxed)) continue;
      slot.key = key;
      slot.value = value;
      slot.full.store(true, order);
      return;
    }
  }

  // Makes room for `more` values beyond those stored, keeping the table at
  // most half full (so every probe ends at an empty slot). Callers reserve
  // for every build in flight too. May throw bad_alloc, changing nothing.
  static void reserve_locked(Shard& s, std::size_t more) {
    Table* old = s.table.load(std::memory_order_relaxed);
    const std::size_t needed = s.count.load(std::memory_order_relaxed) + more;
    const std::size_t capacity = old == nullptr ? 0 : old->mask + 1;
    if (needed * 2 <= capacity) return;
    std::size_t grown = capacity == 0 ? 8 : capacity;
    while (grown < needed * 2) grown *= 2;
    auto fresh = std::make_unique<Table>(grown);
    if (old != nullptr)
      for (std::size_t i = 0; i <= old->mask; ++i)
        if (old->slots[i].full.load(std::memory_order_relaxed))
          place(*fresh, old->slots[i].key, old->slots[i].value, std::memory_order_relaxed);
    if (old != nullptr) fresh->retired.reset(old);
    s.table.store(fresh.release(), std::memory_order_release);  // publishes every slot copied above
  }

  // Needs room reserved. Stores and publishes one value.
  static void publish_locked(Shard& s, const DerivationKey& key, const V& value) noexcept {
    Table* t = s.table.load(std::memory_order_relaxed);
    place(*t, key, value, std::memory_order_release);
    s.count.store(s.count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    s.bytes.store(s.bytes.load(std::memory_order_relaxed) + bytes_of(value), std::memory_order_relaxed);
  }

  // The builder's side. From here on the flight is registered, and every
  // way out (success, an error, an exception while building the error)
  // deregisters it and wakes its waiters: the guard does it without
  // allocating, so running out of host memory cannot strand a waiter.
  template <class Build>
  Result<Value> build_registered(Shard& s, const DerivationKey& key, std::shared_ptr<Flight<V>> flight, Build& build) {
    struct Settle {
      Shard& s;
      const DerivationKey& key;
      Flight<V>& flight;
      bool done = false;
      ~Settle() {
        if (done) return;
        {
          std::lock_guard lock(s.mutex);
          s.flights.erase(key);
          s.failed_builds.fetch_add(1, std::memory_order_relaxed);
        }
        flight.finish(std::nullopt, oom_error());
      }
    } settle{s, key, *flight};

    Result<V> built = run(build);
    if (!built.ok()) built.error().with_context("building " + std::string(derivation_name(kind_)) + " of " + key.to_string());
    {
      std::lock_guard lock(s.mutex);
      s.flights.erase(key);
      if (built.ok()) {
        try {
          reserve_locked(s, 1);  // a no-op unless release() ran during the build
          publish_locked(s, key, built.value());
        } catch (const std::bad_alloc&) {
          // Reachable only when release() raced this build (misuse) and the
          // host is out of memory: the value cannot be kept, nor freed here.
          built = oom_error();
        }
      }
      if (!built.ok()) s.failed_builds.fetch_add(1, std::memory_order_relaxed);  // not memoized: the next caller builds again
      settle.done = true;
    }
    // Waiters wake only after the map is final, so one that retries sees
    // the value or no entry, never the finished flight.
    if (built.ok()) {
      flight->finish(built.value(), std::nullopt);
      return built.value().value();
    }
    try {
      flight->finish(std::nullopt, built.error());
    } catch (const std::bad_alloc&) {
      flight->finish(std::nullopt, oom_error());
    }
    return std::move(built.error());
  }

  static std::uint64_t bytes_of(const DerivedPtr& v) noexcept { return v.bytes; }
  static std::uint64_t bytes_of(const DerivedPair& v) noexcept { return v.first.bytes + v.second.bytes; }

  // The build must not leave waiters hanging, so whatever it throws ends
  // here as an error value.
  template <class Build>
  static Result<V> run(Build& build) noexcept {
    try {
      try {
        return build();
      } catch (const std::bad_alloc&) {
        return oom_error();
      } catch (const std::exception& e) {
        return make_error(ErrorCode::internal, std::string("build threw: ") + e.what());
      } catch (...) {
        return make_error(ErrorCode::internal, "build threw a non-standard exception");
      }
    } catch (...) {  // describing the exception ran out of memory
      return oom_error();
    }
  }

  Error recursion_error(const DerivationKey& key, const char* what) const {
    return make_error(ErrorCode::invalid_argument,
                      std::string(what) + " " + std::string(derivation_name(kind_)) + " of " + key.to_string() +
                          " from inside its own build");
  }

  Derivation kind_;
  HitCounters& counters_;
  std::array<Shard, kShards> shards_;
};

}  // namespace ballast::memo
