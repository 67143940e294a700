// MemoMap<V>: the memo of ONE derivation, sharded by key, with single-flight
// builds. DerivedWeights holds one per derivation.
//
// Why shards of shared_mutex: a hit is on the path of every layer of every
// forward pass, from many threads at once. With one lock, every hit would
// bounce that lock's cache line between cores even when all are readers.
// Sharding by a hash of the key spreads hits over many independent lines,
// and within a shard readers still share. Counters live in the shard for
// the same reason.
#pragma once

#include <ballast/derived_weights.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace ballast::memo {

std::string hex(std::uint64_t v);

// One build in progress; waiters block on it outside the shard lock.
template <class V>
struct Flight {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::optional<V> value;  // set on success
  std::optional<Error> error;  // set on failure
  std::thread::id builder = std::this_thread::get_id();

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

  // 64 shards: with a dozen threads hitting random keys, two land on one
  // shard rarely, and each shard costs only a couple of cache lines.
  static constexpr unsigned kShardBits = 6;
  static constexpr std::size_t kShards = std::size_t{1} << kShardBits;

  explicit MemoMap(Derivation kind) : kind_(kind) {}
  Derivation kind() const noexcept { return kind_; }

  // Keys are device pointers: aligned, so their low bits say nothing.
  // A multiplicative hash moves the well-mixed high bits to the index.
  // Public so tests can pick keys that share a shard.
  static std::size_t shard_index(std::uint64_t key) noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - kShardBits));
  }

  std::optional<Value> find(std::uint64_t key) const noexcept {
    const Shard& s = shard(key);
    std::shared_lock lock(s.mutex);
    auto it = s.entries.find(key);
    if (it != s.entries.end() && !it->second.flight) {
      s.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second.stored->value();
    }
    s.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }

  Result<Insertion<V>> insert(std::uint64_t key, const V& value) {
    Shard& s = shard(key);
    for (;;) {
      std::shared_ptr<Flight<V>> flight;
      {
        std::unique_lock lock(s.mutex);
        auto [it, fresh] = s.entries.try_emplace(key);
        if (fresh) {
          it->second.stored = value;
          s.ready += 1;
          s.bytes += bytes_of(value);
          return Insertion<V>{value.value(), std::nullopt};
        }
        if (!it->second.flight) {
          s.rejected.fetch_add(1, std::memory_order_relaxed);
          return Insertion<V>{it->second.stored->value(), value};
        }
        flight = it->second.flight;
      }
      if (flight->builder == std::this_thread::get_id()) return recursion_error(key, "insert into");
      // The builder wins if it succeeds; if it fails the entry is gone and
      // the next round stores our value.
      flight->wait();
    }
  }

  template <class Build>
  Result<Value> get_or_build(std::uint64_t key, Build&& build) {
    Shard& s = shard(key);
    {
      std::shared_lock lock(s.mutex);
      auto it = s.entries.find(key);
      if (it != s.entries.end() && !it->second.flight) {
        s.hits.fetch_add(1, std::memory_order_relaxed);
        return it->second.stored->value();
      }
    }
    s.misses.fetch_add(1, std::memory_order_relaxed);

    std::shared_ptr<Flight<V>> flight;
    bool building = false;
    {
      std::unique_lock lock(s.mutex);
      auto [it, fresh] = s.entries.try_emplace(key);
      if (!fresh && !it->second.flight) return it->second.stored->value();  // built between our two looks
      if (fresh) {
        try {
          it->second.flight = std::make_shared<Flight<V>>();
        } catch (const std::bad_alloc&) {
          s.entries.erase(it);
          return make_error(ErrorCode::out_of_memory, "no host memory for a memo entry");
        }
        building = true;
        s.builds.fetch_add(1, std::memory_order_relaxed);
      } else {
        s.waits.fetch_add(1, std::memory_order_relaxed);
      }
      flight = it->second.flight;
    }

    if (!building) {
      if (flight->builder == std::this_thread::get_id()) return recursion_error(key, "build");
      flight->wait();
      if (flight->error) return *flight->error;
      return flight->value->value();
    }

    Result<V> built = run(build);
    if (!built.ok()) built.error().with_context("building " + std::string(derivation_name(kind_)) + " of key " + hex(key));
    {
      std::unique_lock lock(s.mutex);
      // Only the builder removes an entry in flight, so `key` is still here.
      auto it = s.entries.try_emplace(key).first;
      if (built.ok()) {
        it->second.stored = built.value();
        it->second.flight.reset();
        s.ready += 1;
        s.bytes += bytes_of(built.value());
      } else {
        s.entries.erase(it);  // not memoized: the next caller builds again
        s.failed_builds.fetch_add(1, std::memory_order_relaxed);
      }
    }
    // Publish to waiters only after the map is final, so a woken waiter
    // that retries sees either the value or no entry, never the flight.
    if (built.ok()) {
      flight->finish(built.value(), std::nullopt);
      return built.value().value();
    }
    flight->finish(std::nullopt, built.error());
    return built.error();
  }

  // Removes every memoized value and hands them back; builds still in
  // flight keep their entries (release must not race with builds).
  std::vector<std::pair<std::uint64_t, V>> take_all() {
    std::vector<std::pair<std::uint64_t, V>> out;
    for (Shard& s : shards_) {
      std::unique_lock lock(s.mutex);
      out.reserve(out.size() + s.ready);
      for (auto it = s.entries.begin(); it != s.entries.end();) {
        if (it->second.flight) {
          ++it;
          continue;
        }
        out.emplace_back(it->first, *it->second.stored);
        it = s.entries.erase(it);
      }
      s.ready = 0;
      s.bytes = 0;
    }
    return out;
  }

  std::size_t len() const noexcept { return sum([](const Shard& s) { return std::uint64_t{s.ready}; }); }
  std::uint64_t bytes() const noexcept { return sum([](const Shard& s) { return s.bytes; }); }

  void add_stats(DerivedWeightsStats& out) const noexcept {
    for (const Shard& s : shards_) {
      out.hits += s.hits.load(std::memory_order_relaxed);
      out.misses += s.misses.load(std::memory_order_relaxed);
      out.builds += s.builds.load(std::memory_order_relaxed);
      out.failed_builds += s.failed_builds.load(std::memory_order_relaxed);
      out.waits += s.waits.load(std::memory_order_relaxed);
      out.rejected_inserts += s.rejected.load(std::memory_order_relaxed);
    }
  }

 private:

  struct Entry {
    std::optional<V> stored;            // set once built or inserted
    std::shared_ptr<Flight<V>> flight;  // set while a build runs
  };

  struct alignas(64) Shard {
    mutable std::shared_mutex mutex;
    std::unordered_map<std::uint64_t, Entry> entries;
    std::size_t ready = 0;    // entries with a value; under the lock
    std::uint64_t bytes = 0;  // their byte sizes; under the lock
    mutable std::atomic<std::uint64_t> hits{0};
    mutable std::atomic<std::uint64_t> misses{0};
    std::atomic<std::uint64_t> builds{0};
    std::atomic<std::uint64_t> failed_builds{0};
    std::atomic<std::uint64_t> waits{0};
    std::atomic<std::uint64_t> rejected{0};
  };

  Shard& shard(std::uint64_t key) noexcept { return shards_[shard_index(key)]; }
  const Shard& shard(std::uint64_t key) const noexcept { return shards_[shard_index(key)]; }

  template <class F>
  std::uint64_t sum(F field) const noexcept {
    std::uint64_t total = 0;
    for (const Shard& s : shards_) {
      std::shared_lock lock(s.mutex);
      total += field(s);
    }
    return total;
  }

  static std::uint64_t bytes_of(const DerivedPtr& v) noexcept { return v.bytes; }
  static std::uint64_t bytes_of(const DerivedPair& v) noexcept { return v.first.bytes + v.second.bytes; }

  // The build must not leave waiters hanging, so whatever it throws ends
  // here as an error value.
  template <class Build>
  static Result<V> run(Build& build) {
    try {
      return build();
    } catch (const std::exception& e) {
      return make_error(ErrorCode::internal, std::string("build threw: ") + e.what());
    } catch (...) {
      return make_error(ErrorCode::internal, "build threw a non-standard exception");
    }
  }

  Error recursion_error(std::uint64_t key, const char* what) const {
    return make_error(ErrorCode::invalid_argument,
                      std::string(what) + " " + std::string(derivation_name(kind_)) + " of key " + hex(key) +
                          " from inside its own build");
  }

  Derivation kind_;
  std::array<Shard, kShards> shards_;
};

}  // namespace ballast::memo
