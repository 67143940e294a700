// A rank's needs as pieces of files: each shard's byte ranges and strided
// rows, with where each lands in the shard's gathered host array. The
// plan counts with them and the load moves bytes with them; a sender and
// a receiver build the same pieces from the same shard plan, so a message
// needs no description of its payload beyond the file stretch it covers.
#pragma once

#include <ballast/shard.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

namespace ballast::dist {

// `rows` runs of `row_bytes` file bytes, one every `row_stride` from
// `offset` (a range is one row), landing one after another at `dest` of
// shard `shard`'s array.
struct Piece {
  std::uint64_t offset = 0;
  std::uint64_t row_bytes = 0;
  std::uint64_t row_stride = 0;
  std::uint64_t rows = 0;
  std::uint32_t shard = 0;  // index in the rank's ShardPlan::weights
  std::uint64_t dest = 0;
  std::uint64_t end() const noexcept { return offset + (rows - 1) * row_stride + row_bytes; }
};

// One rank's pieces of one file, sorted by offset, with the running
// maximum of their ends (pieces of fused parts interleave), so that the
// pieces meeting a stretch are found by two binary searches.
struct FilePieces {
  std::vector<Piece> pieces;
  std::vector<std::uint64_t> max_end;  // max_end[i]: the largest end() of pieces[0..i]
};

struct RankPieces {
  std::map<MappingId, FilePieces> files;
  // Shards with no mapping (inline weights): their indices.
  std::vector<std::uint32_t> inline_shards;
};

RankPieces pieces_of(const ShardPlan& plan);

// The bytes of `p` inside file bytes [lo, hi).
std::uint64_t overlap(const Piece& p, std::uint64_t lo, std::uint64_t hi) noexcept;

// Calls visit(piece, file_offset, length, dest_offset) for every run of
// `file`'s pieces inside [lo, hi), pieces in order, rows in order: the
// canonical order in which a message's payload is packed and unpacked.
void for_each_run(const FilePieces& file, std::uint64_t lo, std::uint64_t hi,
                  const std::function<void(const Piece&, std::uint64_t, std::uint64_t, std::uint64_t)>& visit);

// Bytes of `file`'s pieces inside [lo, hi) (what for_each_run visits).
std::uint64_t bytes_in(const FilePieces& file, std::uint64_t lo, std::uint64_t hi);

}  // namespace ballast::dist
