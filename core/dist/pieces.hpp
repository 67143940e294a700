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
// `offset` (a range is one row), landing `dest_stride` apart from `dest`
// of shard `shard`'s array: one after another for a single view, and
// side by side in each row for the parts of a fused weight's strided
// shard (the shard's dims are [rows, its parts' columns together]).
struct Piece {
  std::uint64_t offset = 0;
  std::uint64_t row_bytes = 0;
  std::uint64_t row_stride = 0;
  std::uint64_t rows = 0;
  std::uint32_t shard = 0;  // index in the rank's ShardPlan::weights
  std::uint64_t dest = 0;
  std::uint64_t dest_stride = 0;
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

// Where the rows of each strided view of `s` land in its dense array:
// part j's row i at at[j] + i * stride[j]. The shard is [rows, columns],
// its dims, so a fused weight's parts lie side by side in each row (part
// 0's columns, then part 1's, ...), not one part after another. Views of
// different row counts (a plan made by hand) cannot share rows: they land
// one after another.
struct StridedLayout {
  std::vector<std::uint64_t> at, stride;
};
StridedLayout strided_layout(const WeightShard& s);

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
