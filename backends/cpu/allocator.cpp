#include "allocator.hpp"

#include <sys/mman.h>

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
constexpr std::uint64_t kHugePage = 2ull << 20;

}  // namespace

Allocator::Allocator(std::uint64_t max_single_allocation) : max_single_(max_single_allocation) {}

Result<BackendRange> Allocator::allocate(std::uint64_t bytes, std::uint64_t alignment) {
  if (alignment > kMaxAlignment)
    return make_error(ErrorCode::invalid_argument,
                      "alignment " + std::to_string(alignment) + " exceeds the largest supported, " + std::to_string(kMaxAlignment));
  if (bytes > max_single_)
    return make_error(ErrorCode::out_of_memory, std::to_string(bytes) + " bytes requested; the largest single allocation is " +
                                                    std::to_string(max_single_) + " bytes (physical memory)");
  std::uint64_t align = alignment < kMinAlignment ? kMinAlignment : alignment;
  // Zero bytes still takes one, so the pointer is unique and freeable.
  std::uint64_t reserve = bytes == 0 ? 1 : bytes;
  const bool huge = bytes >= kHugePage && bytes <= max_single_ - kHugePage;
  if (huge) {
    align = align < kHugePage ? kHugePage : align;
    reserve = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  }
  void* p = ::operator new(static_cast<std::size_t>(reserve), std::align_val_t(align), std::nothrow);
  if (p == nullptr)
    return make_error(ErrorCode::out_of_memory, "the system refused " + std::to_string(bytes) + " bytes");
#ifdef MADV_HUGEPAGE
  if (huge) (void)::madvise(p, reserve, MADV_HUGEPAGE);  // a hint: refusal only costs speed
#endif
  return BackendRange{static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(p)), align};
}

void Allocator::free(const BackendRange& block) {
  ::operator delete(reinterpret_cast<void*>(static_cast<std::uintptr_t>(block.ptr)), std::align_val_t(block.cookie));
}

}  // namespace ballast::cpu
