// Guard bytes after a derivation's outputs, for the CPU kernel tests and
// the conformance suite's derivation cases alike: every output is
// allocated kGuardBytes longer, those bytes are filled with kGuardFill
// before the launch and compared after it. A kernel or shader that writes
// past its rows (a word too many at the end of a row, a workgroup past the
// last) is caught, though every byte the reference compares is right.
#pragma once

#include <ballast/gpu_backend.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace test_support {

inline constexpr std::uint64_t kGuardBytes = 256;
inline constexpr std::byte kGuardFill{0xa5};

// "" when the kGuardBytes from byte `from` of the allocation at `p` still
// hold kGuardFill; otherwise what was written there, naming the output.
inline std::string check_guard(ballast::GpuBackend& b, const char* name, ballast::DevicePtr p, std::uint64_t from) {
  std::vector<std::byte> guard(kGuardBytes);
  if (auto s = b.copy_to_host(guard, p, from); !s.ok())
    return std::string("download the guard after ") + name + ": " + s.to_string();
  std::uint64_t changed = 0, first = 0;
  for (std::uint64_t i = kGuardBytes; i-- > 0;)
    if (guard[i] != kGuardFill) ++changed, first = i;
  if (changed == 0) return {};
  return std::string(name) + ": " + std::to_string(changed) + " bytes written past its " + std::to_string(from) +
         ", the first at byte " + std::to_string(from + first);
}

}  // namespace test_support
