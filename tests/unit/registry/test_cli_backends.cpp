// `ballast backends` end to end: the real binary, with the plugin search
// path pointed at the fake plugins (the one documented variable).
#include "unit/registry/fake_plugins.hpp"
#include <ballast/read_plan.hpp>
#include <doctest/doctest.h>
#include <ballast/plugin_abi.hpp>
#include <nlohmann/json.hpp>

#include "run_program.hpp"

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

namespace {

using ballast::test::Run;
using ballast::test::run_program;

Run run(const std::string& plugin_dir, const std::string& args) {
  return run_program("BALLAST_PLUGIN_PATH='" + plugin_dir + "' '" BALLAST_CLI "' backends " + args);
}

using ballast::testing::kFakes;

}  // namespace

TEST_CASE("ballast backends --json lists every backend with state, devices and capabilities") {
  const Run r = run(kFakes + "/working", "--load --json");
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  const auto& backends = doc.at("backends");
  REQUIRE(backends.size() == 4);
  CHECK(backends[0]["name"] == "cpu");
  CHECK(backends[0]["state"] == "available");
  CHECK(backends[0]["library"] == "built in");
  CHECK(backends[0]["devices"].size() >= 1);
  CHECK(backends[0]["capabilities"]["max_single_allocation"].get<std::uint64_t>() > 0);

  CHECK(backends[1]["name"] == "cuda");
  CHECK(backends[1]["available"] == false);
  if (backends[1]["state"] == "not found") {
    CHECK(backends[1]["searched"][0] == kFakes + "/working/libballast-cuda.so");
    CHECK(backends[1]["capabilities"].is_null());
  }

  const auto& vulkan = backends[3];
  CHECK(vulkan["state"] == "available");
  CHECK(vulkan["library"] == kFakes + "/working/libballast-vulkan.so");
  REQUIRE(vulkan["devices"].size() == 2);
  CHECK(vulkan["devices"][1]["name"] == "fake device 1");
  CHECK(vulkan["devices"][1]["uuid"] == "GPU-00000001-aaaa-bbbb-cccc-0123456789AB");
  CHECK(vulkan["devices"][1]["memory_bytes"] == 2147483648ull);
  CHECK(vulkan["capabilities"]["host_registration"] == false);
  CHECK(vulkan["capabilities"]["host_registration_note"] == "fake backend: uploads only");
  CHECK(doc.at("plugin_search_path")[0] == kFakes + "/working");
  // The cold read path's engines: io_uring as this kernel allows, and
  // GPUDirect Storage said, never silently absent.
  CHECK(doc.at("cold_reads").at("io_uring") == ballast::io_uring_available());
  CHECK(doc.at("cold_reads").at("gpudirect_storage").get<std::string>().find("libcufile") != std::string::npos);
  // The communicators --comm can pick: local built in; the mpi and nccl
  // libraries found on the plugin path (beside this build's libballast
  // when they were built) or not found with the folders searched, never
  // loaded by listing.
  const auto& comms = doc.at("communicators");
  REQUIRE(comms.size() == 3);
  CHECK(comms[0]["name"] == "local");
  CHECK(comms[0]["state"] == "built in");
  const char* libraries[] = {"mpi", "nccl"};
  for (std::size_t i = 0; i < 2; ++i) {
    const std::string name = libraries[i], file = "/libballast_comm_" + name + ".so";
    CAPTURE(name);
    const auto& c = comms[i + 1];
    CHECK(c["name"] == name);
    if (c["state"] == "found") {
      CHECK(c["library"].get<std::string>().ends_with(file));
    } else {
      CHECK(c["state"] == "not found");
      CHECK(c["reason"].get<std::string>().find("searched: " + kFakes + "/working" + file) != std::string::npos);
    }
  }
}

TEST_CASE("ballast backends prints a table with reasons, and the upload fallback") {
  const Run ok = run(kFakes + "/working", "--load");
  REQUIRE(ok.exit_code == 0);
  CHECK(ok.out.find("host registration: not supported (fake backend: uploads only): weights are uploaded instead") !=
        std::string::npos);
  CHECK(ok.out.find("fake device 1") != std::string::npos);

  const Run unavailable = run(kFakes + "/unavailable", "--load");
  REQUIRE(unavailable.exit_code == 0);
  CHECK(unavailable.out.find("vulkan: unavailable") != std::string::npos);
  CHECK(unavailable.out.find("no fake physical device (test plugin)") != std::string::npos);

  const Run broken = run(kFakes + "/wrong_abi", "--load");
  REQUIRE(broken.exit_code == 0);
  CHECK(broken.out.find("vulkan: load error") != std::string::npos);
  // The fake claims ABI 2.0; both versions are named.
  CHECK(broken.out.find("plugin ABI 2.0, core plugin ABI " + std::to_string(BALLAST_PLUGIN_API_MAJOR) + "." +
                        std::to_string(BALLAST_PLUGIN_API_MINOR)) != std::string::npos);
}

TEST_CASE("ballast backends refuses unknown options with the usage exit code") {
  CHECK(run(kFakes + "/working", "--bogus").exit_code == 2);
}

TEST_CASE("ballast backends lists a third-party plugin found on the search path, after the first-party ones") {
  const Run r = run(kFakes + "/third_party", "--load --json");
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  const auto& backends = doc.at("backends");
  REQUIRE(backends.size() == 5);
  CHECK(backends[0]["name"] == "cpu");
  CHECK(backends[3]["name"] == "vulkan");  // listed whether or not its plugin is here
  const auto& third = backends[4];
  CHECK(third["name"] == "thirdparty");
  CHECK(third["state"] == "available");
  CHECK(third["library"] == kFakes + "/third_party/libballast-thirdparty.so");
  CHECK(third["devices"].size() == 2);

  const Run text = run(kFakes + "/third_party", "--load");
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("thirdparty: available") != std::string::npos);
}

TEST_CASE("ballast backends finds plugin files without loading them; --load runs them") {
  const std::string marker = "/tmp/ballast-cli-marker-" + std::to_string(::getpid());
  std::remove(marker.c_str());
  const std::string env = "BALLAST_TEST_MARKER='" + marker + "' ";
  const Run listed = run_program(env + "BALLAST_PLUGIN_PATH='" + kFakes + "/marker' '" BALLAST_CLI "' backends --json");
  REQUIRE(listed.exit_code == 0);
  CHECK_FALSE(std::ifstream(marker).good());  // nothing of the plugin ran
  const auto doc = nlohmann::json::parse(listed.out);
  const auto& marked = doc.at("backends").back();
  CHECK(marked["name"] == "marker");
  CHECK(marked["state"] == "found");
  CHECK(marked["library"] == kFakes + "/marker/libballast-marker.so");
  CHECK(marked["devices"].empty());

  const Run text = run_program(env + "BALLAST_PLUGIN_PATH='" + kFakes + "/marker' '" BALLAST_CLI "' backends");
  CHECK(text.out.find("marker: found") != std::string::npos);
  CHECK(text.out.find("ballast backends --load") != std::string::npos);
  CHECK_FALSE(std::ifstream(marker).good());

  const Run loaded = run_program(env + "BALLAST_PLUGIN_PATH='" + kFakes + "/marker' '" BALLAST_CLI "' backends --load");
  CHECK(loaded.out.find("marker: available") != std::string::npos);
  CHECK(std::ifstream(marker).good());
  std::remove(marker.c_str());
}
