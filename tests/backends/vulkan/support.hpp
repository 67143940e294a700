// Shared helpers of the Vulkan plugin tests.
#pragma once

#include "vulkan/backend.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ballast::vulkan::test {

// Opens `vulkan<suffix>` (e.g. "?validation=on"); fails the test on error.
std::unique_ptr<VulkanBackend> open(const std::string& suffix = "");

BackendConfig config(const std::string& suffix);

template <class T>
DevicePtr upload(GpuBackend& b, const std::vector<T>& values, std::uint64_t pad_front = 0) {
  auto ptr = b.allocate(values.size() * sizeof(T) + pad_front + 8, 256);
  REQUIRE(ptr.ok());
  if (!values.empty())
    REQUIRE(b.copy_to_device(*ptr, pad_front, std::as_bytes(std::span(values))).ok());
  return *ptr;
}

template <class T>
std::vector<T> download(GpuBackend& b, DevicePtr ptr, std::size_t count, std::uint64_t offset = 0) {
  std::vector<T> out(count);
  const Status s = b.copy_to_host(std::as_writable_bytes(std::span(out)), ptr, offset);
  INFO(s.to_string());
  REQUIRE(s.ok());
  return out;
}

}  // namespace ballast::vulkan::test
