// Which byte ranges of one mapped data file DeviceWeights registers
// zero-copy: the smallest set of ranges that covers every referenced byte.
//
//   1. the hull of the file's referenced bytes, split wherever a dead gap
//      between two referenced ranges is at least `split_gap` long;
//   2. each range widened to the backend's import alignment (by host
//      address, clamped to the mapping);
//   3. ranges that then overlap, or share a host page (vendors that pin
//      whole pages refuse a second registration of a pinned page), merged;
//   4. none longer than the backend's largest single allocation where it
//      can be helped: a hull that would grow past it is split between two
//      referenced ranges (even with no gap between them), and such a split
//      is not merged back (the two ranges may then share a page: on a
//      vendor that refuses that, the second falls back to upload, visibly).
//      A single referenced range longer than the limit stays whole.
//
// A referenced range lies wholly inside one planned range, so every weight
// is contiguous inside one registration. docs/residency.md.
#pragma once

#include <ballast/weight_store.hpp>

#include <cstdint>
#include <vector>

namespace ballast::device {

struct RegistrationPlanInput {
  std::vector<ByteRange> referenced;  // each weight's range, sorted by offset (they may overlap),
                                      // inside [0, file_size)
  std::uint64_t file_size = 0;
  std::uint64_t base_address = 0;      // host address of the mapping's first byte
  std::uint64_t import_alignment = 1;  // Capabilities::import_alignment (0 is taken as 1)
  std::uint64_t page_size = 4096;      // host page size
  std::uint64_t split_gap = 0;         // a dead gap at least this long splits
  std::uint64_t max_range = 0;         // Capabilities::max_single_allocation (0: no limit)
};

// Sorted, non-overlapping file-offset ranges inside [0, file_size).
std::vector<ByteRange> plan_registrations(const RegistrationPlanInput& in);

}  // namespace ballast::device
