// One thing paged or uploaded residency holds on the device: a source
// weight's bytes, or a derived value. Keyed by identity::Entry (where the
// bytes are plus every launch parameter), never by a device pointer, so an
// evicted value's pointer reused by a later allocation can never be found
// under the old key.
#pragma once

#include <ballast/derive.hpp>
#include <ballast/status.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace ballast::residency {

struct Entry {
  enum class State : std::uint8_t { absent, loading, resident };

  bool derived = false;
  ValueId weight{};                       // a source entry's weight (the first name that reached it)
  std::optional<PlannedDerivation> plan;  // a derived entry's derivation
  std::string name;                       // "weight 'w'" / "transpose of 'w'": for errors
  bool evictable = true;                  // paged; upload entries stay until release
  std::uint64_t first_bytes = 0;          // known before loading
  std::uint64_t second_bytes = 0;         // pair kinds only
  std::uint64_t bytes() const noexcept { return first_bytes + second_bytes; }

  State state = State::absent;
  DevicePtr first = 0;
  DevicePtr second = 0;
  std::uint32_t pins = 0;
  std::uint64_t last_use = 0;    // use clock at the last direct pin
  std::uint64_t loaded_at = 0;   // load clock when it last became resident
  bool requested = false;        // ever pinned or prefetched by the engine (not only as a dependency)
  bool awaiting_use = false;     // prefetched and not pinned since
  std::uint64_t loads = 0;       // times it became resident (> 1: a rebuild or re-page-in)
  std::uint64_t failures = 0;    // failed loads; waiters compare it to see theirs
  Status failure;                // the last failed load's error, for its waiters

  // Eviction bookkeeping (EvictionIndex): creation order, the tie-break,
  // and where the index filed the entry (the keys it was filed under).
  std::uint64_t seq = 0;
  int filed_in = 0;              // 0: not filed; else the set (see eviction.cpp)
  std::uint64_t filed_use = 0, filed_loaded = 0, filed_bytes = 0;
};

}  // namespace ballast::residency
