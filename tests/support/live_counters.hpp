// A backend's live allocations, bytes and registrations, compared and shown:
// what the fault sweeps and the alloc-failure tests check is back at its
// baseline after a failure and a release.
#pragma once

#include <ballast/gpu_backend.hpp>

#include <string>

namespace ballast::testing {

inline bool same_live(const AllocationCounters& a, const AllocationCounters& b) {
  return a.live_allocations == b.live_allocations && a.live_bytes == b.live_bytes &&
         a.live_registrations == b.live_registrations;
}

inline std::string live_text(const AllocationCounters& c) {
  return std::to_string(c.live_allocations) + " allocations (" + std::to_string(c.live_bytes) + " bytes), " +
         std::to_string(c.live_registrations) + " registrations";
}

}  // namespace ballast::testing
