// needed_bytes (totals.hpp).
#include "shard/totals.hpp"

#include <algorithm>
#include <map>

namespace ballast::shard {

namespace {

constexpr std::uint64_t kMaxMergedPieces = std::uint64_t{1} << 24;

std::uint64_t own_bytes(const WeightShard& s) {
  std::uint64_t n = 0;
  for (const ByteRange& r : s.ranges) n += r.length;
  for (const StridedView& v : s.strided) n += v.bytes();
  return n;
}

// Weights whose bytes overlap: every piece, merged.
Result<std::uint64_t> merged(std::span<const WeightShard> shards, std::span<const std::size_t> group) {
  std::vector<ByteRange> ranges;
  std::vector<StridedView> views;
  for (std::size_t i : group) {
    ranges.insert(ranges.end(), shards[i].ranges.begin(), shards[i].ranges.end());
    views.insert(views.end(), shards[i].strided.begin(), shards[i].strided.end());
  }
  // Aliases with the same shape give the same views: count them once.
  auto by_fields = [](const StridedView& a, const StridedView& b) {
    return std::tie(a.offset, a.row_bytes, a.row_stride, a.rows) < std::tie(b.offset, b.row_bytes, b.row_stride, b.rows);
  };
  std::sort(views.begin(), views.end(), by_fields);
  views.erase(std::unique(views.begin(), views.end()), views.end());
  std::uint64_t pieces = ranges.size();
  for (const StridedView& v : views)
    if (__builtin_add_overflow(pieces, v.rows, &pieces) || pieces > kMaxMergedPieces)
      return make_error(ErrorCode::unsupported, "weights sharing bytes would need more than " +
                                                    std::to_string(kMaxMergedPieces) +
                                                    " pieces merged to count the bytes a rank reads");
  for (const StridedView& v : views)
    for (std::uint64_t row = 0; row < v.rows; ++row) ranges.push_back({v.offset + row * v.row_stride, v.row_bytes});
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::uint64_t total = 0, end = 0;
  bool open = false;
  std::uint64_t start = 0;
  for (const ByteRange& r : ranges) {
    if (r.length == 0) continue;
    if (open && r.offset <= end) {
      end = std::max(end, r.offset + r.length);
      continue;
    }
    if (open) total += end - start;
    start = r.offset;
    end = r.offset + r.length;
    open = true;
  }
  if (open) total += end - start;
  return total;
}

}  // namespace

Result<std::uint64_t> needed_bytes(std::span<const WeightShard> shards, std::span<const ByteRange> extents) {
  // Per mapping (inline weights each on their own: they never share bytes
  // with a file), the weights by where they start.
  std::map<std::int64_t, std::vector<std::size_t>> by_mapping;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].mapping) by_mapping[*shards[i].mapping].push_back(i);
    else total += own_bytes(shards[i]);
  }
  for (auto& [mapping, members] : by_mapping) {
    std::sort(members.begin(), members.end(),
              [&](std::size_t a, std::size_t b) { return extents[a].offset < extents[b].offset; });
    std::size_t first = 0;
    while (first < members.size()) {
      // A group: weights chained by overlapping extents.
      std::uint64_t end = extents[members[first]].offset + extents[members[first]].length;
      std::size_t last = first + 1;
      while (last < members.size() && extents[members[last]].offset < end) {
        end = std::max(end, extents[members[last]].offset + extents[members[last]].length);
        ++last;
      }
      if (last == first + 1) {
        total += own_bytes(shards[members[first]]);
      } else {
        BALLAST_ASSIGN_OR_RETURN(const std::uint64_t n,
                                 merged(shards, std::span(members).subspan(first, last - first)));
        total += n;
      }
      first = last;
    }
  }
  return total;
}

}  // namespace ballast::shard
