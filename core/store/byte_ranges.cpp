#include "store/byte_ranges.hpp"

#include <algorithm>

namespace ballast::store {

std::vector<ByteRange> merge_ranges(std::vector<ByteRange> ranges, std::uint64_t limit) {
  // Clip first so that a range whose end would overflow never gets summed.
  std::erase_if(ranges, [limit](const ByteRange& r) { return r.length == 0 || r.offset >= limit; });
  for (ByteRange& r : ranges) r.length = std::min(r.length, limit - r.offset);
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });

  std::vector<ByteRange> merged;
  for (const ByteRange& r : ranges) {
    if (!merged.empty()) {
      ByteRange& last = merged.back();
      const std::uint64_t last_end = last.offset + last.length;  // <= limit: no overflow
      if (r.offset <= last_end) {
        last.length = std::max(last_end, r.offset + r.length) - last.offset;
        continue;
      }
    }
    merged.push_back(r);
  }
  return merged;
}

std::vector<ByteRange> complement_ranges(const std::vector<ByteRange>& merged, std::uint64_t limit) {
  std::vector<ByteRange> gaps;
  std::uint64_t cursor = 0;
  for (const ByteRange& r : merged) {
    if (r.offset >= limit) break;
    if (r.offset > cursor) gaps.push_back({cursor, r.offset - cursor});
    cursor = std::max(cursor, std::min(limit, r.offset + std::min(r.length, limit - r.offset)));
  }
  if (cursor < limit) gaps.push_back({cursor, limit - cursor});
  return gaps;
}

std::uint64_t total_length(const std::vector<ByteRange>& ranges) {
  std::uint64_t total = 0;
  for (const ByteRange& r : ranges) total += r.length;
  return total;
}

}  // namespace ballast::store
