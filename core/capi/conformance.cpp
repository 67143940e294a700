// ballast_run_conformance(): the conformance suite from an engine. The suite
// is its own program (ballast-conformance, installed in the prefix's bin/
// beside the CLI; lib/ holds libballast), so it runs in a child process: a
// driver that crashes or hangs under the suite's stress takes the child
// down, never the engine that asked. The child's --json summary on its
// stdout is the result; its own log goes to stderr, which is inherited.
#include "capi/status.hpp"

#include <ballast/ballast.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <fcntl.h>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

using ballast::capi::make_status;

// <dir of libballast>/../bin/ballast-conformance: the install layout,
// moved or not, and the build tree's (lib/ and bin/ side by side).
std::string runner_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ballast_run_conformance), &info) == 0 || info.dli_fname == nullptr) return {};
  std::error_code ec;
  const auto lib = std::filesystem::canonical(info.dli_fname, ec);
  if (ec) return {};
  return (lib.parent_path().parent_path() / "bin" / "ballast-conformance").string();
}

// Everything the child writes on `fd`, until it closes it.
std::string read_all(int fd) {
  std::string out;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) out.append(buffer, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  return out;
}

ballast_status* io_error(const std::string& what) { return make_status(BALLAST_E_IO, "io: " + what); }

}  // namespace

extern "C" ballast_status* ballast_run_conformance(const char* backend_config, const char* filter,
                                                   ballast_conformance_result* out, char* json, size_t json_capacity,
                                                   size_t* json_length) {
  return ballast::capi::guarded([&]() -> ballast_status* {
    if (backend_config == nullptr) return ballast::capi::invalid_argument("invalid_argument: the backend config is NULL");
    if (out == nullptr || out->size < sizeof(std::size_t))
      return ballast::capi::invalid_argument("invalid_argument: the result struct is NULL or its size is not set");
    if (json == nullptr && json_capacity > 0)
      return ballast::capi::invalid_argument("invalid_argument: the JSON buffer is NULL");
    const std::string runner = runner_path();
    std::error_code ec;
    if (runner.empty() || !std::filesystem::exists(runner, ec))
      return make_status(BALLAST_E_UNAVAILABLE, "unavailable: the conformance runner is not installed" +
                                                    (runner.empty() ? std::string() : " at " + runner) +
                                                    " (it is built and installed with BALLAST_BUILD_TESTS=ON)");
    std::vector<std::string> args = {runner, "--backend", backend_config, "--json"};
    if (filter != nullptr && *filter != '\0') args.push_back(std::string("-tc=") + filter);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return io_error(std::string("pipe for the conformance runner: ") + std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);  // dup2 clears CLOEXEC on the copy
    pid_t pid = 0;
    const int spawned = ::posix_spawn(&pid, runner.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(pipe_fds[1]);
    if (spawned != 0) {
      ::close(pipe_fds[0]);
      return io_error("cannot run " + runner + ": " + std::strerror(spawned));
    }
    const std::string text = read_all(pipe_fds[0]);
    ::close(pipe_fds[0]);
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) < 0) {
      if (errno != EINTR) return io_error(std::string("waiting for the conformance runner: ") + std::strerror(errno));
    }
    if (WIFSIGNALED(wstatus))
      return make_status(BALLAST_E_DEVICE_ERROR, "device_error: the conformance runner died of signal " +
                                                     std::to_string(WTERMSIG(wstatus)) + " on backend " + backend_config);

    ballast_conformance_result full{};
    full.size = sizeof full;
    full.exit_code = WEXITSTATUS(wstatus);
    // The summary's counts (absent when the runner refused its arguments).
    const nlohmann::json summary = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (summary.is_object()) {
      const auto count = [&](const char* key) {
        const auto it = summary.find(key);
        return it != summary.end() && it->is_number_unsigned() ? it->get<std::uint32_t>() : 0u;
      };
      full.passed = count("passed");
      full.failed = count("failed");
      full.skipped = count("skipped");
    } else if (full.exit_code != 0) {
      return make_status(BALLAST_E_INVALID_ARGUMENT, "invalid_argument: the conformance runner refused backend '" +
                                                         std::string(backend_config) + "' (exit code " +
                                                         std::to_string(full.exit_code) + "; its message is on stderr)");
    }
    if (json_length != nullptr) *json_length = text.size();
    if (json_capacity > 0) {
      const std::size_t n = text.size() < json_capacity - 1 ? text.size() : json_capacity - 1;
      std::memcpy(json, text.data(), n);
      json[n] = '\0';
    }
    return ballast::capi::write_out(full, out);
  });
}
