// Opening the CPU backend directly through its plugin (no registry), and
// moving host bytes in and out of it, for the CPU unit tests.
#pragma once

#include "cpu/plugin.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace cpu_test {

inline std::unique_ptr<ballast::GpuBackend> open_cpu(std::map<std::string, std::string, std::less<>> options = {}) {
  ballast::BackendConfig config;
  config.name = "cpu";
  config.options = std::move(options);
  auto r = ballast::cpu::plugin().open(config);
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  // Behind the core's checks, through the same tables the registry uses.
  auto checked = ballast::adopt_device(std::move(r.value()));
  REQUIRE_MESSAGE(checked.ok(), checked.error().to_string());
  return std::move(checked.value());
}

// A device copy of `bytes` (at least one byte allocated so the pointer is real).
inline ballast::DevicePtr upload(ballast::GpuBackend& b, const std::vector<std::byte>& bytes) {
  auto p = b.allocate(bytes.size());
  REQUIRE_MESSAGE(p.ok(), p.error().to_string());
  auto st = b.copy_to_device(*p, 0, bytes);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  return *p;
}

inline std::vector<std::byte> download(ballast::GpuBackend& b, ballast::DevicePtr p, std::uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  auto st = b.copy_to_host(out, p, 0);
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  return out;
}

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace cpu_test
