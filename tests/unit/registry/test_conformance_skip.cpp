// ballast-conformance's decision between "skipped" (the backend is not on
// this machine) and "failed" (anything else), run as ctest runs it.
#include "unit/registry/fake_plugins.hpp"
#include <doctest/doctest.h>

#include "run_program.hpp"

#include <regex>
#include <string>

namespace {

using ballast::test::Run;
using ballast::test::run_program;

// `test_cases` is a doctest -tc filter; "none" selects nothing, for the
// cases that must end before any test runs (skip or failure to open).
Run conformance(const std::string& plugin_dir, const std::string& config, const std::string& test_cases = "none") {
  return run_program("BALLAST_PLUGIN_PATH='" + plugin_dir + "' '" BALLAST_CONFORMANCE "' --backend '" + config +
                     "' '-tc=" + test_cases + "'");
}

using ballast::testing::kFakes;

}  // namespace

TEST_CASE("a backend without driver or device is skipped with its reason (exit 77)") {
  const Run r = conformance(kFakes + "/unavailable", "vulkan");
  CHECK(r.exit_code == 77);
  CHECK(r.out.rfind("skipped: unavailable: ", 0) == 0);
  CHECK(r.out.find("no fake physical device (test plugin)") != std::string::npos);
}

TEST_CASE("a plugin that is there but broken fails rather than skips") {
  for (const char* kind : {"wrong_abi", "abi_older", "no_symbol", "silent_error"}) {
    CAPTURE(kind);
    const Run r = conformance(kFakes + "/" + kind, "vulkan");
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("skipped") == std::string::npos);
    CHECK(r.out.find("cannot open backend") != std::string::npos);
  }
}

TEST_CASE("a device that does not exist fails; an unknown backend and a bad config are usage errors") {
  CHECK(conformance(kFakes + "/working", "vulkan:5").exit_code == 1);
  CHECK(conformance(kFakes + "/working", "cpu:7").exit_code == 1);
  CHECK(conformance(kFakes + "/working", "opencl").exit_code == 2);
  CHECK(conformance(kFakes + "/working", "cpu?").exit_code == 2);
}

TEST_CASE("a backend that opens runs the tests it is asked for") {
  const Run r = conformance(kFakes + "/working", "cpu", "device info*");
  CAPTURE(r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("backend \"cpu\"") != std::string::npos);
  // Exactly the one selected test case ran, and passed.
  CHECK(std::regex_search(r.out, std::regex(R"(test cases: +1 \| +1 passed \| +0 failed)")));
  // A filter that selects nothing is not mistaken for a run: doctest reports zero test cases.
  const Run none = conformance(kFakes + "/working", "cpu");
  CHECK(std::regex_search(none.out, std::regex(R"(test cases: +0 \| +0 passed)")));
}

// The run's first call frees a 1-byte allocation; a backend that cannot
// free fails the run, and the run still ends with its summary (JSON on
// stdout with --json) saying why, as every run that opened its backend does.
TEST_CASE("a backend whose free fails on the first probe fails with the summary and the reason") {
  const Run r = conformance(kFakes + "/free_fails", "vulkan");
  CAPTURE(r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("==== ballast conformance summary") != std::string::npos);
  CHECK(r.out.find("fake backend: free refused") != std::string::npos);
  CHECK(r.out.find("result:   failed") != std::string::npos);
  const Run json = run_program("(BALLAST_PLUGIN_PATH='" + kFakes +
                               "/free_fails' '" BALLAST_CONFORMANCE "' --backend vulkan --json 2>/dev/null)");
  CAPTURE(json.out);
  CHECK(json.exit_code == 1);
  CHECK(json.out.rfind("{", 0) == 0);
  CHECK(json.out.find("\"result\": \"failed\"") != std::string::npos);
  CHECK(json.out.find("free refused") != std::string::npos);
}

// A case that fails part way must give back what it took: a leak left by
// one failure is reported against later cases and the whole run, and
// sends the backend's author after the wrong bug.
TEST_CASE("a backend whose allocations fail is told so, without registrations leaked by the suite") {
  const Run r = conformance(kFakes + "/null_allocation", "vulkan", "validation: outputs and copies into a read-only*");
  CAPTURE(r.out);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("the backend returned a null pointer") != std::string::npos);
  CHECK(r.out.find("leaked") == std::string::npos);
}
