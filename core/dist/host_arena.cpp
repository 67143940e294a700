// HostArena (cooperative_load.hpp): one anonymous mapping for a rank's
// shards. Why not std::vector: it zero-fills what the load writes anyway,
// and its pages are faulted in 4 KiB at a time; profiling the load of a
// 911 MB model showed the faults and the fill above half its time.
#include <ballast/cooperative_load.hpp>

#include <sys/mman.h>

#include <cstdint>
#include <utility>

namespace ballast {

namespace {
constexpr std::uint64_t kHugePage = 2ull << 20;
}

Result<HostArena> HostArena::allocate(std::uint64_t bytes) {
  HostArena a;
  if (bytes == 0) return a;
  // Room to start on a 2 MiB boundary, so the kernel can back it with huge pages.
  if (bytes > UINT64_MAX - 2 * kHugePage)
    return make_error(ErrorCode::overflow, std::to_string(bytes) + " bytes of host memory");
  const std::uint64_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  void* p = ::mmap(nullptr, static_cast<std::size_t>(mapped), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return make_error(ErrorCode::out_of_memory, "the system refused " + std::to_string(bytes) + " bytes of host memory");
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
#ifdef MADV_HUGEPAGE
  // [aligned, aligned + whole huge pages) lies inside the mapping: it is
  // less than one huge page past its start, and the mapping has one spare.
  (void)::madvise(reinterpret_cast<void*>(aligned), static_cast<std::size_t>(mapped - kHugePage), MADV_HUGEPAGE);  // a hint
#endif
  a.mapping_ = p;
  a.mapped_ = mapped;
  a.data_ = reinterpret_cast<std::byte*>(aligned);
  a.size_ = bytes;
  return a;
}

HostArena::HostArena(HostArena&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)), mapped_(std::exchange(other.mapped_, 0)),
      data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HostArena& HostArena::operator=(HostArena&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) ::munmap(mapping_, static_cast<std::size_t>(mapped_));
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapped_ = std::exchange(other.mapped_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HostArena::~HostArena() {
  if (mapping_ != nullptr) ::munmap(mapping_, static_cast<std::size_t>(mapped_));
}

}  // namespace ballast
