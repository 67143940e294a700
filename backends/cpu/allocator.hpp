// Real, aligned host allocations. The core's record (GpuBackend) checks
// every pointer first and hands each allocation's cookie and size back to
// free(). What the caller leaks the core frees before the device goes.
//
// Blocks of 2 MiB and more are whole 2 MiB pages of their own anonymous
// mappings (transparent huge pages asked for), and freed ones are kept
// mapped, up to a bound, for the next allocations: "retained" pages.
// Why: memory the process gives back to the kernel comes back untouched,
// and the first touch of every page is a fault. A paged decode loop frees
// and allocates the same bytes every token, and on a virtual machine of
// the CI kind a fresh page costs more than its copy: first touch moved
// 0.3-1.1 GB/s there, against 15-20 GB/s into touched memory
// (docs/residency.md). An allocation takes the smallest retained range that
// holds it, else moves retained ranges into one fresh range of addresses
// with mremap(2) (page tables move, the pages stay; about 1 ms for 256
// MiB), so a block freed in pieces serves a larger one. Smaller blocks go
// to operator new, whose own free lists keep them.
//
// Thread-safe (a mutex over the retained ranges and the live blocks'
// extents).
#pragma once

#include <ballast/gpu_backend.hpp>
#include <ballast/status.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace ballast::cpu {

class Allocator {
 public:
  // retain_bytes: how many bytes of freed large blocks stay mapped for
  // reuse (0: every free goes back to the kernel).
  Allocator(std::uint64_t max_single_allocation, std::uint64_t retain_bytes);
  ~Allocator();  // unmaps what it retains (live blocks are the core's to free first)
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // alignment: a power of two (checked by the core) up to 1 GiB.
  Result<BackendRange> allocate(std::uint64_t bytes, std::uint64_t alignment);
  // `block` as allocate() returned it.
  void free(const BackendRange& block);

  struct Stats {
    std::uint64_t retained_bytes = 0;  // freed, still mapped, not in any block
    std::uint64_t reused_bytes = 0;    // of large blocks handed out, the bytes that were retained pages
    std::uint64_t fresh_bytes = 0;     // of large blocks handed out, the bytes newly mapped
  };
  Stats stats() const;

  // Tests replace mmap(2), mremap(2) and the small blocks' operator new
  // to make them fail: a refused mapping or small block gives every
  // retained page back and tries once more; a failed move leaves the rest
  // of the block to fresh pages.
  using Map = void* (*)(void* address, std::size_t bytes, int prot, int flags, int fd, long offset);
  using Remap = void* (*)(void* old_address, std::size_t old_size, std::size_t new_size, int flags, void* new_address);
  using New = void* (*)(std::size_t bytes, std::align_val_t alignment);  // nullptr when refused
  void set_map_for_testing(Map map) { map_ = map; }
  void set_remap_for_testing(Remap remap) { remap_ = remap; }
  void set_new_for_testing(New allocate) { new_ = allocate; }

 private:
  // A range of pages inside one mapping (one VMA: what mremap moves whole).
  struct Extent {
    std::uintptr_t start = 0;
    std::uint64_t bytes = 0;
  };
  using Retained = std::multimap<std::uint64_t, std::uintptr_t>;  // bytes -> start; each one extent
  Result<BackendRange> allocate_mapped(std::uint64_t size);
  // With mutex_ held: keeps `e` (what passes the bound goes to the kernel).
  void retain(const Extent& e) noexcept;
  // With mutex_ held: `size` bytes of fresh pages on a 2 MiB boundary, or
  // 0. Refused, and if any pages are retained, it unmaps them all (they
  // are what the process holds beyond its blocks) and asks once more.
  std::uintptr_t map_fresh(std::uint64_t size);
  // With mutex_ held: unmaps every retained range; false if there was none.
  bool drop_retained() noexcept;
  // With mutex_ held: the first `bytes` of a retained range, its rest kept.
  Extent take_retained(Retained::iterator it, std::uint64_t bytes) noexcept;

  const std::uint64_t max_single_;
  const std::uint64_t retain_cap_;
  mutable std::mutex mutex_;
  Retained retained_;
  std::map<std::uintptr_t, std::vector<Extent>> extents_;  // a live mapped block's start -> its extents
  Stats stats_;
  Map map_;
  Remap remap_;
  New new_;
};

}  // namespace ballast::cpu
