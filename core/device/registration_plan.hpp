// Which byte ranges of one mapped data file DeviceWeights registers
// zero-copy: the smallest set of ranges that covers every referenced byte.
//
//   1. the hull of the file's referenced bytes, split wherever a dead gap
//      between two referenced ranges is at least `split_gap` long;
//   2. each range widened to the backend's import alignment (by host
//      address, clamped to the mapping);
//   3. ranges that then overlap, or share a host page (vendors that pin
//      whole pages refuse a second registration of a pinned page), merged.
//
// A referenced range lies wholly inside one planned range, so every weight
// is contiguous inside one registration. docs/residency.md.
#pragma once

#include <ballast/weight_store.hpp>

#include <cstdint>
#include <vector>

namespace ballast::device {

struct RegistrationPlanInput {
  std::vector<ByteRange> referenced;  // merged, sorted, non-empty, inside [0, file_size)
  std::uint64_t file_size = 0;
  std::uint64_t base_address = 0;      // host address of the mapping's first byte
  std::uint64_t import_alignment = 1;  // Capabilities::import_alignment (0 is taken as 1)
  std::uint64_t page_size = 4096;      // host page size
  std::uint64_t split_gap = 0;         // a dead gap at least this long splits
};

// Sorted, non-overlapping file-offset ranges inside [0, file_size).
std::vector<ByteRange> plan_registrations(const RegistrationPlanInput& in);

}  // namespace ballast::device
