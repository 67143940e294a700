// test_device_faults --backend <config> [doctest options]
//
// Opens the backend once through the registry (a plugin is reached across
// the plugin boundary, as an engine reaches it), generates the sample model
// (every derivation kind) with tools/gen/make_sample_model.py, and runs the
// device-fault tests against it. A backend this machine does not have, or a
// python without onnx, prints `skipped: <reason>` and exits 77.
#define DOCTEST_CONFIG_IMPLEMENT
#include "faults/fault_sweep.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/backend_registry.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace ballast::faults {
namespace {
std::unique_ptr<GpuBackend> g_backend;
std::string g_config = "cpu";
std::filesystem::path g_model_dir;
}  // namespace

GpuBackend& backend() { return *g_backend; }
const std::string& backend_config() { return g_config; }
const std::filesystem::path& model_dir() { return g_model_dir; }

Watchdog::Watchdog() : thread_([this] { loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::arm(std::string what, std::chrono::seconds limit) {
  {
    std::lock_guard lock(mutex_);
    what_ = std::move(what);
    deadline_ = std::chrono::steady_clock::now() + limit;
    armed_ = true;
  }
  cv_.notify_all();
}

void Watchdog::disarm() {
  std::lock_guard lock(mutex_);
  armed_ = false;
}

void Watchdog::loop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    if (!armed_) {
      cv_.wait(lock);
      continue;
    }
    const auto deadline = deadline_;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && armed_ && !stop_ &&
        std::chrono::steady_clock::now() >= deadline_) {
      std::fprintf(stderr, "HANG: %s did not finish in time; ending the process\n", what_.c_str());
      std::fflush(stderr);
      std::_Exit(3);
    }
  }
}

Watchdog& watchdog() {
  static Watchdog w;
  return w;
}

}  // namespace ballast::faults

namespace {

constexpr int kExitSkip = 77;

// Not on this machine: the plugin is not there, or it has no driver/device.
bool backend_absent(const ballast::Error& e, const std::string& name) {
  if (e.code == ballast::ErrorCode::unavailable) return true;
  if (e.code != ballast::ErrorCode::not_found) return false;
  for (const auto& listing : ballast::list_backends())
    if (listing.name == name) return listing.state == ballast::BackendListing::State::not_found;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ballast;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--backend" && i + 1 < argc) {
      faults::g_config = argv[++i];
    } else if (arg.substr(0, 10) == "--backend=") {
      faults::g_config = std::string(arg.substr(10));
    } else {
      rest.push_back(argv[i]);
    }
  }

  auto opened = open_backend(faults::g_config);
  if (!opened.ok()) {
    const auto parsed = parse_backend_config(faults::g_config);
    if (parsed.ok() && backend_absent(opened.error(), parsed->name)) {
      std::printf("skipped: %s\n", opened.error().to_string().c_str());
      return kExitSkip;
    }
    std::fprintf(stderr, "test_device_faults: cannot open backend: %s\n", opened.error().to_string().c_str());
    return 1;
  }
  faults::g_backend = std::move(*opened);
  const DeviceInfo& info = faults::g_backend->info();
  std::printf("backend \"%s\": %s (%s)\n", faults::g_config.c_str(), info.name.c_str(), info.driver.c_str());

  const std::string python = BALLAST_TEST_PYTHON;
  if (std::system((python + " -c 'import onnx, numpy' >/dev/null 2>&1").c_str()) != 0) {
    std::printf("skipped: %s cannot import onnx and numpy (install python3-onnx python3-numpy)\n", python.c_str());
    return kExitSkip;
  }
  std::optional<testing::ScratchDir> scratch;
  scratch.emplace("device_faults_" + info.backend);
  faults::g_model_dir = scratch->path();
  const std::string gen = python + " " + BALLAST_SOURCE_DIR + "/tools/gen/make_sample_model.py '" +
                          faults::g_model_dir.string() + "' 2>/dev/null";
  if (std::system(gen.c_str()) != 0) {
    std::fprintf(stderr, "test_device_faults: generating the model failed: %s\n", gen.c_str());
    return 1;
  }

  doctest::Context context;
  context.applyCommandLine(static_cast<int>(rest.size()), rest.data());
  const int result = context.run();
  faults::g_backend.reset();
  return result;
}
