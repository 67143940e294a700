// The physical limit a warm page-in is measured against (`ballast replay
// --anchor`): the paged bytes copied out of the model's mapped files, warm,
// by two threads, into memory that was touched beforehand, so no page
// faults and no allocation are timed; from 8 MiB its stores go past the
// cache, as the CPU backend's page-ins do. A page-in into fresh memory pays a
// first-touch fault per page on top (replay_walk.hpp's Anchor measures that
// copy); a page-in into a pooled block should run near this rate.
#pragma once

#include "support/replay_walk.hpp"

#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <span>

namespace ballast::cli {

// `bytes` (cycling through `weights` when they hold less) copied by
// `threads` threads, each its own contiguous half, into one buffer touched
// before the clock starts; the best of `repeats` runs (the first one warms
// the page cache and the buffer's TLB). Each copy runs inside
// WeightStore::transfer, as a page-in does.
Result<Anchor> measure_hot_copy(const WeightStore& store, std::span<const ValueId> weights, std::uint64_t bytes,
                                unsigned threads = 2, int repeats = 3);

}  // namespace ballast::cli
