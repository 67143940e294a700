// Shared state of the device-fault tests (tests/faults): the backend under
// test, opened once through the registry (for a plugin: across the plugin
// boundary), and the generated model.
#pragma once

#include <ballast/gpu_backend.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ballast::faults {

// Whether two runs read back the same bytes, value by value. memcmp, not
// operator==: the asan preset builds at -O0, where comparing vectors of
// std::byte element by element took a quarter of the longest sweep's time.
inline bool same_bytes(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0);
}
inline bool same_values(const std::vector<std::vector<std::byte>>& a, const std::vector<std::vector<std::byte>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bytes(a[i], b[i])) return false;
  return true;
}

// How a sweep derives: one derive_weights batch, or derive_weight per entry.
enum class Way { batch, one_by_one };

GpuBackend& backend();
const std::string& backend_config();
// The folder holding sample.onnx (tools/gen/make_sample_model.py).
const std::filesystem::path& model_dir();

// One timer for the whole process: arm() before a run, disarm() after. A
// run still going at its deadline prints what it was and ends the process
// (a hang is a failure with a name, not a ctest timeout).
class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  void arm(std::string what, std::chrono::seconds limit);
  void disarm();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::string what_;
  std::chrono::steady_clock::time_point deadline_{};
  bool armed_ = false;
  bool stop_ = false;
  std::thread thread_;
};

Watchdog& watchdog();

}  // namespace ballast::faults
