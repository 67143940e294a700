// Shared by every conformance test: the backend under test (opened once by
// main.cpp from --backend) and small helpers that keep each test about the
// behaviour it checks rather than about bookkeeping.
#pragma once

#include <ballast/backend_registry.hpp>
#include <ballast/gpu_backend.hpp>

#include <doctest/doctest.h>

#include <support/derivation_cases.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace conformance {

using ballast::DevicePtr;

// The backend named by --backend; valid for the whole run.
ballast::GpuBackend& gpu();
// The config string it was opened from.
const std::string& backend_config();

// Checks, when it goes out of scope, that the backend's live allocation
// and registration counters are back where they were when it was made.
class LeakCheck {
 public:
  LeakCheck();
  ~LeakCheck();
  LeakCheck(const LeakCheck&) = delete;
  LeakCheck& operator=(const LeakCheck&) = delete;

 private:
  ballast::AllocationCounters baseline_;
};

// One device allocation, freed (and the free checked) on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DevicePtr ptr, std::uint64_t bytes) : ptr_(ptr), bytes_(bytes), owned_(true) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer() { reset(); }

  DevicePtr ptr() const { return ptr_; }
  std::uint64_t bytes() const { return bytes_; }
  void reset();

 private:
  DevicePtr ptr_ = 0;
  std::uint64_t bytes_ = 0;
  bool owned_ = false;
};

// Allocates `bytes` (REQUIREs success).
DeviceBuffer allocate(std::uint64_t bytes, std::uint64_t alignment = 256);
// Allocates and fills with `host` (REQUIREs success).
DeviceBuffer upload(std::span<const std::byte> host);
// Reads `bytes` from `ptr + offset` (REQUIREs success).
std::vector<std::byte> download(DevicePtr ptr, std::uint64_t bytes, std::uint64_t offset = 0);

// Deterministic pseudo-random bytes, so a failure reproduces exactly
// (tests/support/derivation_cases.hpp).
using ballast::test_cases::random_bytes;

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// "ok" or the error in one line, for failure messages.
std::string describe(const ballast::Status& s);

}  // namespace conformance
