// A rank's needs as pieces of files (pieces.hpp).
#include "dist/pieces.hpp"

#include <algorithm>

namespace ballast::dist {

namespace {

// The rows [first, last) of `p` that meet [lo, hi); first == last: none.
std::pair<std::uint64_t, std::uint64_t> rows_meeting(const Piece& p, std::uint64_t lo, std::uint64_t hi) noexcept {
  if (p.rows == 0 || p.row_bytes == 0 || hi <= p.offset || lo >= p.end() || lo >= hi) return {0, 0};
  // Row i is [offset + i * stride, + row_bytes): it meets [lo, hi) when it
  // ends after lo and starts before hi.
  const std::uint64_t first = lo < p.offset + p.row_bytes ? 0 : (lo - p.offset - p.row_bytes) / p.row_stride + 1;
  const std::uint64_t last = std::min(p.rows, (hi - p.offset + p.row_stride - 1) / p.row_stride);
  return {first, std::max(first, last)};
}

}  // namespace

StridedLayout strided_layout(const WeightShard& s) {
  StridedLayout out;
  const bool same_rows = std::all_of(s.strided.begin(), s.strided.end(),
                                     [&](const StridedView& v) { return v.rows == s.strided.front().rows; });
  std::uint64_t row = 0;
  for (const StridedView& v : s.strided) row += v.row_bytes;
  std::uint64_t at = 0;
  for (const StridedView& v : s.strided) {
    out.at.push_back(at);
    out.stride.push_back(same_rows ? row : v.row_bytes);
    at += same_rows ? v.row_bytes : v.bytes();
  }
  return out;
}

RankPieces pieces_of(const ShardPlan& plan) {
  RankPieces out;
  for (std::uint32_t i = 0; i < plan.weights.size(); ++i) {
    const WeightShard& s = plan.weights[i];
    if (!s.mapping) {
      out.inline_shards.push_back(i);
      continue;
    }
    std::vector<Piece>& list = out.files[*s.mapping].pieces;
    std::uint64_t dest = 0;
    for (const ByteRange& r : s.ranges) {
      if (r.length != 0) list.push_back({r.offset, r.length, r.length, 1, i, dest, r.length});
      dest += r.length;
    }
    const StridedLayout layout = strided_layout(s);
    for (std::size_t part = 0; part < s.strided.size(); ++part) {
      const StridedView& v = s.strided[part];
      if (v.bytes() != 0)
        list.push_back({v.offset, v.row_bytes, v.row_stride, v.rows, i, dest + layout.at[part], layout.stride[part]});
    }
  }
  for (auto& [mapping, file] : out.files) {
    std::stable_sort(file.pieces.begin(), file.pieces.end(),
                     [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
    std::uint64_t running = 0;
    file.max_end.reserve(file.pieces.size());
    for (const Piece& p : file.pieces) file.max_end.push_back(running = std::max(running, p.end()));
  }
  return out;
}

std::uint64_t overlap(const Piece& p, std::uint64_t lo, std::uint64_t hi) noexcept {
  const auto [first, last] = rows_meeting(p, lo, hi);
  if (first == last) return 0;
  std::uint64_t bytes = (last - first) * p.row_bytes;
  const std::uint64_t first_start = p.offset + first * p.row_stride;
  const std::uint64_t last_end = p.offset + (last - 1) * p.row_stride + p.row_bytes;
  if (lo > first_start) bytes -= lo - first_start;  // the first row starts before lo
  if (last_end > hi) bytes -= last_end - hi;        // the last row ends after hi
  return bytes;
}

template <class Visit>
static void each_piece(const FilePieces& file, std::uint64_t lo, std::uint64_t hi, Visit&& visit) {
  // Pieces that start before hi, from the first whose running end passes
  // lo (every earlier piece ends at or before lo).
  const auto begin = std::upper_bound(file.max_end.begin(), file.max_end.end(), lo) - file.max_end.begin();
  const auto end = std::lower_bound(file.pieces.begin(), file.pieces.end(), hi,
                                    [](const Piece& p, std::uint64_t at) { return p.offset < at; }) -
                   file.pieces.begin();
  for (auto i = begin; i < end; ++i)
    if (file.pieces[i].end() > lo) visit(file.pieces[i]);
}

void for_each_run(const FilePieces& file, std::uint64_t lo, std::uint64_t hi,
                  const std::function<void(const Piece&, std::uint64_t, std::uint64_t, std::uint64_t)>& visit) {
  each_piece(file, lo, hi, [&](const Piece& p) {
    const auto [first, last] = rows_meeting(p, lo, hi);
    for (std::uint64_t row = first; row < last; ++row) {
      const std::uint64_t start = p.offset + row * p.row_stride;
      const std::uint64_t a = std::max(start, lo), b = std::min(start + p.row_bytes, hi);
      if (a < b) visit(p, a, b - a, p.dest + row * p.dest_stride + (a - start));
    }
  });
}

std::uint64_t bytes_in(const FilePieces& file, std::uint64_t lo, std::uint64_t hi) {
  std::uint64_t bytes = 0;
  each_piece(file, lo, hi, [&](const Piece& p) { bytes += overlap(p, lo, hi); });
  return bytes;
}

}  // namespace ballast::dist
