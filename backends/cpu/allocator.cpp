#include "allocator.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <iterator>
#include <new>
#include <string>

namespace ballast::cpu {

namespace {

// Every block starts on a cache line, whatever was asked, so kernels never
// share a line between two allocations.
constexpr std::uint64_t kMinAlignment = 64;
constexpr std::uint64_t kMaxAlignment = 1ull << 30;
// Large blocks start on a 2 MiB boundary, fill whole 2 MiB pages and ask
// for transparent huge pages: the kernels (a transpose above all) walk
// many rows at once, and 4 KiB pages would make every row a TLB miss.
// Retained ranges are whole huge pages too, so moving one keeps its pages.
constexpr std::uint64_t kHugePage = 2ull << 20;
// The cookie of a mapped block; operator new's blocks carry their
// alignment (at least kMinAlignment), which the matching delete needs.
constexpr std::uint64_t kMapped = 0;

void* allocate_small(std::size_t bytes, std::align_val_t alignment) {
  return ::operator new(bytes, alignment, std::nothrow);
}
void* remap(void* old_address, std::size_t old_size, std::size_t new_size, int flags, void* new_address) {
  return ::mremap(old_address, old_size, new_size, flags, new_address);
}

void* at(std::uintptr_t p) { return reinterpret_cast<void*>(p); }

void ask_huge(std::uintptr_t start, std::uint64_t bytes) {
#ifdef MADV_HUGEPAGE
  (void)::madvise(at(start), bytes, MADV_HUGEPAGE);  // a hint: refusal only costs speed
#endif
}

void* map(void* address, std::size_t bytes, int prot, int flags, int fd, long offset) {
  return ::mmap(address, bytes, prot, flags, fd, offset);
}

}  // namespace

Allocator::Allocator(std::uint64_t max_single_allocation, std::uint64_t retain_bytes)
    : max_single_(max_single_allocation),
      retain_cap_(retain_bytes / kHugePage * kHugePage),
      map_(map),
      remap_(remap),
      new_(allocate_small) {}

Allocator::~Allocator() {
  for (const auto& [bytes, start] : retained_) ::munmap(at(start), bytes);
  for (const auto& [start, parts] : extents_)
    for (const Extent& e : parts) ::munmap(at(e.start), e.bytes);
}

Result<BackendRange> Allocator::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  if (alignment > kMaxAlignment)
    return make_error(ErrorCode::invalid_argument,
                      "alignment " + std::to_string(alignment) + " exceeds the largest supported, " + std::to_string(kMaxAlignment));
  if (bytes > max_single_)
    return make_error(ErrorCode::out_of_memory, std::to_string(bytes) +
                                                    " bytes requested; the largest single allocation is " +
                                                    std::to_string(max_single_) + " bytes (physical memory)");
  const bool huge = bytes >= kHugePage && bytes <= max_single_ - kHugePage;
  const std::uint64_t pages = huge ? (bytes + kHugePage - 1) / kHugePage * kHugePage : 0;
  if (huge && alignment <= kHugePage) return allocate_mapped(pages);
  // Small blocks, and large ones aligned past 2 MiB (nothing in ballast asks
  // for that): operator new. Zero bytes still takes one, so the pointer is
  // unique and freeable.
  std::uint64_t align = std::max(alignment, kMinAlignment);
  std::uint64_t reserve = bytes == 0 ? 1 : bytes;
  if (huge) reserve = pages;
  void* p = new_(static_cast<std::size_t>(reserve), std::align_val_t(align));
  if (p == nullptr) {  // what this allocator holds beyond its blocks goes back first
    std::lock_guard lock(mutex_);
    if (drop_retained()) p = new_(static_cast<std::size_t>(reserve), std::align_val_t(align));
  }
  if (p == nullptr)
    return make_error(ErrorCode::out_of_memory, "the system refused " + std::to_string(bytes) + " bytes");
  if (huge) ask_huge(reinterpret_cast<std::uintptr_t>(p), reserve);
  return BackendRange{static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(p)), align};
}

bool Allocator::drop_retained() noexcept {
  if (retained_.empty()) return false;
  for (const auto& [bytes, start] : retained_) ::munmap(at(start), bytes);
  retained_.clear();
  stats_.retained_bytes = 0;
  return true;
}

std::uintptr_t Allocator::map_fresh(std::uint64_t size) {
  void* p = map_(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED && drop_retained())
    p = map_(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  const auto raw = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t start = (raw + kHugePage - 1) & ~(kHugePage - 1), end = start + size;
  if (start > raw) ::munmap(p, start - raw);
  if (raw + size + kHugePage > end) ::munmap(at(end), raw + size + kHugePage - end);
  ask_huge(start, size);
  return start;
}

Allocator::Extent Allocator::take_retained(Retained::iterator it, std::uint64_t bytes) noexcept {
  const Extent e{it->second, bytes};
  stats_.retained_bytes -= bytes;
  if (it->first == bytes) {
    retained_.erase(it);
  } else {  // the rest stays, re-keyed in place (no allocation)
    auto node = retained_.extract(it);
    node.key() -= bytes;
    node.mapped() += bytes;
    retained_.insert(std::move(node));
  }
  return e;
}

void Allocator::retain(const Extent& e) noexcept {
  const std::uint64_t room = retain_cap_ - std::min(retain_cap_, stats_.retained_bytes);
  const std::uint64_t keep = std::min(room, e.bytes);
  if (keep < e.bytes) ::munmap(at(e.start + keep), e.bytes - keep);
  if (keep == 0) return;
  try {
    retained_.emplace(keep, e.start);
    stats_.retained_bytes += keep;
  } catch (const std::bad_alloc&) {  // no node for it: the kernel has it back
    ::munmap(at(e.start), keep);
  }
}

Result<BackendRange> Allocator::allocate_mapped(std::uint64_t size) {
  std::lock_guard lock(mutex_);
  std::vector<Extent> parts;
  std::uintptr_t base = 0;
  std::uint64_t reused = 0;
  try {
    parts.reserve(retained_.size() + 1);
    if (auto fit = retained_.lower_bound(size); fit != retained_.end()) {
      // The smallest retained range that holds the block: its front.
      parts.push_back(take_retained(fit, size));
      base = parts[0].start;
      reused = size;
    } else {
      base = map_fresh(size);
      if (base == 0)
        return make_error(ErrorCode::out_of_memory, "the system refused " + std::to_string(size) + " bytes (mmap)");
      // Retained ranges, largest first, moved over the fresh pages.
      while (reused < size && !retained_.empty()) {
        const auto largest = std::prev(retained_.end());
        const Extent from = take_retained(largest, std::min(size - reused, largest->first));
        const std::uintptr_t to = base + reused;
        if (remap_(at(from.start), from.bytes, from.bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at(to)) == MAP_FAILED) {
          // The source is as it was; the destination may have lost its
          // pages (mremap unmaps it first), so it is mapped afresh.
          retain(from);
          if (map_(at(to), size - reused, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
              MAP_FAILED) {
            for (const Extent& e : parts) ::munmap(at(e.start), e.bytes);
            ::munmap(at(to), size - reused);
            return make_error(ErrorCode::out_of_memory, "the system refused " + std::to_string(size) + " bytes (mmap)");
          }
          ask_huge(to, size - reused);
          break;
        }
        parts.push_back(Extent{to, from.bytes});
        reused += from.bytes;
      }
      if (reused < size) parts.push_back(Extent{base + reused, size - reused});
    }
    extents_.emplace(base, parts);
  } catch (const std::bad_alloc&) {  // no room for the record: nothing is handed out
    for (const Extent& e : parts) ::munmap(at(e.start), e.bytes);
    return make_error(ErrorCode::out_of_memory, "no memory to record a block of " + std::to_string(size) + " bytes");
  }
  stats_.reused_bytes += reused;
  stats_.fresh_bytes += size - reused;
  return BackendRange{static_cast<DevicePtr>(base), kMapped};
}

void Allocator::free(const BackendRange& block) {
  if (block.cookie != kMapped) {
    ::operator delete(reinterpret_cast<void*>(static_cast<std::uintptr_t>(block.ptr)), std::align_val_t(block.cookie));
    return;
  }
  std::lock_guard lock(mutex_);
  const auto it = extents_.find(static_cast<std::uintptr_t>(block.ptr));
  if (it == extents_.end()) return;  // the core frees only what it handed out
  for (const Extent& e : it->second) retain(e);
  extents_.erase(it);
}

Allocator::Stats Allocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace ballast::cpu
