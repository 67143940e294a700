// cached_bytes(): how much of a range the page cache holds now, so a load
// can copy warm bytes straight from the mapping (no read, no staging) and
// read only the cold ones. mincore(2) over the mapping: it reads nothing
// and faults nothing in.
#include <ballast/read_plan.hpp>

#include "store/store_access.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace ballast {

Result<std::uint64_t> cached_bytes(const WeightStore& store, MappingId mapping, std::span<const ReadRange> ranges) {
  const auto file = store::StoreAccess::mapping(store, mapping);
  if (!file) return make_error(ErrorCode::not_found, "cached_bytes: mapping " + std::to_string(mapping) + " is not this store's");
  const Bytes all = file->bytes();
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<std::uintptr_t>(all.data());  // page-aligned: mmap's
  std::uint64_t cached = 0;
  std::vector<unsigned char> resident;
  for (const ReadRange& r : ranges) {
    if (r.length == 0) continue;
    if (r.offset > all.size() || r.length > all.size() - r.offset)
      return make_error(ErrorCode::out_of_bounds, "cached_bytes: a range lies outside " + file->path().string());
    const std::uint64_t first = r.offset / page * page;
    const std::uint64_t end = r.offset + r.length;
    const std::uint64_t pages = (end - first + page - 1) / page;
    resident.assign(pages, 0);
    if (::mincore(reinterpret_cast<void*>(base + first), end - first, resident.data()) != 0)
      return make_error(ErrorCode::io, "cached_bytes: mincore over " + file->path().string() + ": " + std::strerror(errno));
    for (std::uint64_t i = 0; i < pages; ++i) {
      if ((resident[i] & 1) == 0) continue;
      const std::uint64_t lo = std::max(r.offset, first + i * page);
      const std::uint64_t hi = std::min(end, first + (i + 1) * page);
      cached += hi - lo;
    }
  }
  return cached;
}

}  // namespace ballast
