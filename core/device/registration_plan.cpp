#include "device/registration_plan.hpp"

#include <algorithm>

namespace ballast::device {
namespace {

// Addresses of a real mapping are far from 2^64, but a hand-built input
// may not be: every step saturates instead of wrapping.
std::uint64_t align_down(std::uint64_t v, std::uint64_t a) { return v - v % a; }
std::uint64_t align_up(std::uint64_t v, std::uint64_t a) {
  const std::uint64_t r = v % a;
  if (r == 0) return v;
  return v > UINT64_MAX - (a - r) ? UINT64_MAX : v + (a - r);
}

}  // namespace

std::vector<ByteRange> plan_registrations(const RegistrationPlanInput& in) {
  const std::uint64_t align = std::max<std::uint64_t>(in.import_alignment, 1);
  const std::uint64_t block = std::max({align, in.page_size, std::uint64_t{1}});
  // The longest hull that stays under the limit once widened at both ends.
  const std::uint64_t widening = 2 * block;
  const std::uint64_t max_hull = in.max_range == 0 ? UINT64_MAX : (in.max_range > widening ? in.max_range - widening : 1);

  // 1. Hulls, split at large dead gaps and before they outgrow the limit.
  std::vector<ByteRange> hulls;
  std::vector<bool> forced;  // hulls[i] starts where the limit split it from hulls[i - 1]
  for (const ByteRange& r : in.referenced) {
    if (r.length == 0 || r.offset >= in.file_size) continue;
    const std::uint64_t end = r.offset + std::min(r.length, in.file_size - r.offset);
    if (!hulls.empty()) {
      ByteRange& last = hulls.back();
      const std::uint64_t last_end = last.offset + last.length;
      const bool near = r.offset < last_end || r.offset - last_end < in.split_gap;
      const std::uint64_t grown = std::max(last_end, end) - last.offset;
      if (near && (grown <= max_hull || r.offset < last_end)) {
        last.length = grown;
        continue;
      }
      forced.push_back(near);
    } else {
      forced.push_back(false);
    }
    hulls.push_back({r.offset, end - r.offset});
  }

  // 2. Widened to the import alignment, by address, inside the mapping.
  const std::uint64_t base = in.base_address;
  const std::uint64_t map_end = base > UINT64_MAX - in.file_size ? UINT64_MAX : base + in.file_size;
  for (ByteRange& h : hulls) {
    const std::uint64_t lo = std::max(base, align_down(base + h.offset, align));
    const std::uint64_t hi = std::min(map_end, align_up(base + h.offset + h.length, align));
    h = {lo - base, hi - lo};
  }

  // 3. Merged where they overlap or share a page (or an alignment block),
  // except where step 1 split them for the limit.
  std::vector<ByteRange> out;
  for (std::size_t i = 0; i < hulls.size(); ++i) {
    const ByteRange& h = hulls[i];
    if (!out.empty() && !forced[i]) {
      ByteRange& last = out.back();
      const std::uint64_t last_end = last.offset + last.length;  // > last.offset: non-empty
      const bool shares_block = (base + last_end - 1) / block >= (base + h.offset) / block;
      if (h.offset <= last_end || shares_block) {
        last.length = std::max(last_end, h.offset + h.length) - last.offset;
        continue;
      }
    }
    out.push_back(h);
  }
  return out;
}

}  // namespace ballast::device
