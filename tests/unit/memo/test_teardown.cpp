#include <ballast/derived_weights.hpp>
#include <ballast/model_resource.hpp>
#include <doctest/doctest.h>

#include "unit/memo/recording_backend.hpp"

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace ballast;
using ballast::test::RecordingBackend;
using ballast::test::key_of;

namespace {

// A resource that logs its releases and can be told to fail or throw.
class FakeResource final : public ModelResource<GpuBackend> {
 public:
  enum class Mode { ok, fail, throws };
  FakeResource(std::string name, std::vector<std::string>& log, std::uint64_t bytes, Mode mode = Mode::ok)
      : name_(std::move(name)), log_(log), bytes_(bytes), mode_(mode) {}

  std::string label() const override { return name_; }
  Released release(GpuBackend&) override {
    log_.push_back(name_);
    if (mode_ == Mode::throws) throw std::runtime_error("boom");
    Released r;
    r.bytes_freed = std::exchange(bytes_, 0);
    r.allocations_freed = r.bytes_freed == 0 ? 0 : 1;
    if (mode_ == Mode::fail) {
      r.status = make_error(ErrorCode::device_error, "driver refused");
      r.failed_frees = 1;
      mode_ = Mode::ok;  // idempotent: the resource owns nothing after the first try
    }
    return r;
  }

 private:
  std::string name_;
  std::vector<std::string>& log_;
  std::uint64_t bytes_;
  Mode mode_;
};

}  // namespace

TEST_CASE("teardown releases in reverse order of registration and keeps going past failures") {
  RecordingBackend gpu;
  std::vector<std::string> log;
  FakeResource uploads("uploads", log, 1000);
  FakeResource kv("kv cache", log, 500, FakeResource::Mode::fail);
  FakeResource scratch("scratch", log, 0, FakeResource::Mode::throws);
  FakeResource plans("plans", log, 24);
  TeardownHost<GpuBackend> host;
  host.add(uploads);
  host.add(kv);
  host.add(scratch);
  host.add(plans);
  host.add(kv);  // registering twice registers once
  CHECK(host.size() == 4);

  TeardownReport report = host.teardown(gpu);
  CHECK(log == std::vector<std::string>{"plans", "scratch", "kv cache", "uploads"});
  REQUIRE(report.entries.size() == 4);
  CHECK(report.entries[0].label == "plans");
  CHECK(report.entries[0].status.ok());
  CHECK(report.entries[1].label == "scratch");
  CHECK(report.entries[1].status.code() == ErrorCode::internal);
  CHECK(report.entries[1].status.to_string().find("boom") != std::string::npos);
  CHECK(report.entries[2].label == "kv cache");
  CHECK(report.entries[2].status.code() == ErrorCode::device_error);
  CHECK(report.entries[3].label == "uploads");
  CHECK(report.entries[3].bytes_freed == 1000);
  CHECK_FALSE(report.ok());
  CHECK(report.failed_resources() == 2);
  CHECK(report.bytes_freed() == 1000 + 500 + 24);
  CHECK(report.allocations_freed() == 3);
  // The first failure in release order, attributed to its resource.
  CHECK(report.status().code() == ErrorCode::internal);
  CHECK(report.status().to_string().find("tearing down scratch") != std::string::npos);

  // Tearing down again releases again (idempotent resources free nothing).
  TeardownReport again = host.teardown(gpu);
  CHECK(log.size() == 8);
  CHECK(again.bytes_freed() == 0);
  CHECK(again.failed_resources() == 1);  // `scratch` still throws
}

TEST_CASE("teardown of a model's DerivedWeights frees every value and leaves the keys") {
  RecordingBackend gpu;
  const DevicePtr key = gpu.allocate(4096).value();
  DerivedWeights memo("layer 0 derived");
  auto v = memo.get_or_build_pair(derive::quant_int8, key_of(key), [&]() -> Result<DerivedPair> {
    return DerivedPair{{gpu.allocate(1024).value(), 1024}, {gpu.allocate(16).value(), 16}};
  });
  REQUIRE(v.ok());
  TeardownHost<GpuBackend> host;
  host.add(memo);
  TeardownReport report = host.teardown(gpu);
  CHECK(report.ok());
  REQUIRE(report.entries.size() == 1);
  CHECK(report.entries[0].label == "layer 0 derived");
  CHECK(report.entries[0].bytes_freed == 1040);
  CHECK(report.entries[0].allocations_freed == 2);
  CHECK(memo.is_empty());
  CHECK(gpu.counters().live_allocations == 1);
  CHECK(gpu.is_live(key));
}

TEST_CASE("the destructor backstop tears down only when teardown() has not run since the last add") {
  RecordingBackend gpu;
  std::vector<std::string> log;
  FakeResource a("a", log, 10);
  FakeResource b("b", log, 20);
  {
    TeardownHost<GpuBackend> host(gpu);
    host.add(a);
    host.add(b);
  }
  CHECK(log == std::vector<std::string>{"b", "a"});

  log.clear();
  {
    TeardownHost<GpuBackend> host(gpu);
    host.add(a);
    static_cast<void>(host.teardown(gpu));
  }
  CHECK(log == std::vector<std::string>{"a"});

  log.clear();
  {
    TeardownHost<GpuBackend> host;  // no backend: nothing to release with
    host.add(a);
  }
  CHECK(log.empty());
}

TEST_CASE("the report prints one aligned block") {
  TeardownReport report;
  report.entries.push_back({"plans", Status(), 24, 1, 0});
  report.entries.push_back({"kv cache", make_error(ErrorCode::device_error, "driver refused"), 0, 0, 1});
  report.entries.push_back({"derived weights", Status(), 3 * 1024 * 1024 + 512, 1200, 0});
  const std::string text = report.to_string();
  const std::string expected =
      "teardown: 3 resources released last-registered first, 1 failed, 3.0 MiB freed\n"
      "  #  resource         status  allocations  bytes freed\n"
      "  1  plans            ok                1           24\n"
      "  2  kv cache         FAILED            0            0  device_error: driver refused\n"
      "  3  derived weights  ok            1,200    3,146,240\n"
      "     total            FAILED        1,201    3,146,264\n";
  CHECK(text == expected);

  TeardownReport empty;
  CHECK(empty.ok());
  CHECK(empty.to_string() ==
        "teardown: 0 resources released last-registered first, all ok, 0 B freed\n"
        "  #  resource  status  allocations  bytes freed\n"
        "     total     ok                0            0\n");
}
