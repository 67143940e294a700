// ballast-conformance's decision between "skipped" (the backend is not on
// this machine) and "failed" (anything else), run as ctest runs it.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace {

struct Run {
  int exit_code = -1;
  std::string out;
};

Run conformance(const std::string& plugin_dir, const std::string& config) {
  const std::string command = "BALLAST_PLUGIN_PATH='" + plugin_dir + "' '" BALLAST_CONFORMANCE "' --backend '" + config +
                              "' -tc=none 2>&1";
  Run r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kFakes = FAKE_PLUGIN_ROOT;

}  // namespace

TEST_CASE("a backend without driver or device is skipped with its reason (exit 77)") {
  const Run r = conformance(kFakes + "/unavailable", "vulkan");
  CHECK(r.exit_code == 77);
  CHECK(r.out.rfind("skipped: unavailable: ", 0) == 0);
  CHECK(r.out.find("no fake physical device (test plugin)") != std::string::npos);
}

TEST_CASE("a plugin that is there but broken fails rather than skips") {
  for (const char* kind : {"wrong_abi", "wrong_fingerprint", "no_symbol", "throws"}) {
    CAPTURE(kind);
    const Run r = conformance(kFakes + "/" + kind, "vulkan");
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("skipped") == std::string::npos);
    CHECK(r.out.find("cannot open backend") != std::string::npos);
  }
}

TEST_CASE("a device that does not exist, an unknown backend and a bad config fail") {
  CHECK(conformance(kFakes + "/working", "vulkan:5").exit_code == 1);
  CHECK(conformance(kFakes + "/working", "cpu:7").exit_code == 1);
  CHECK(conformance(kFakes + "/working", "opencl").exit_code == 1);
  CHECK(conformance(kFakes + "/working", "cpu?").exit_code == 1);
}

TEST_CASE("a backend that opens runs the tests it is asked for") {
  const Run r = conformance(kFakes + "/working", "cpu");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("backend \"cpu\"") != std::string::npos);
}
