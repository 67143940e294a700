// Bytes a set of shards needs from storage, each byte once.
#pragma once

#include <ballast/shard.hpp>

#include <span>

namespace ballast::shard {

// The union of the shards' ranges and strided views' rows. `extents` are
// the weights' whole byte ranges, in the same order (same mapping): weights
// that do not overlap (nearly all) add their bytes directly; only where
// weights share bytes are their pieces merged. unsupported when such
// shared weights would need more than 2^24 pieces merged (a hostile file of
// thousands of aliases over one blob), rather than unbounded work.
Result<std::uint64_t> needed_bytes(std::span<const WeightShard> shards, std::span<const ByteRange> extents);

}  // namespace ballast::shard
