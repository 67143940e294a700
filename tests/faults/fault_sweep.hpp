// Shared state of the device-fault tests (tests/faults): the backend under
// test, opened once through the registry (for a plugin: across the plugin
// boundary), and the generated model.
#pragma once

#include <ballast/gpu_backend.hpp>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

namespace ballast::faults {

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
