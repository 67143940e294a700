// One run of one command: what the commands that read a model share (load
// it, plan its derivations, open the backend) and the one place where an
// error becomes a line on stderr and an exit code.
//
// Why one place: every command used to repeat `report_error(...); return
// kExitBadInput;` after each step, and derive, derive --residency and replay
// each repeated the load / plan / open preamble and the teardown check at
// the end. Here each step reports its own error and returns false, so a
// command reads as its steps:
//
//   CommandContext ctx("derive");
//   if (!ctx.load_model(opt.model) || !ctx.open_backend(opt.backend)) return ctx.exit_code();
//
// and a failure of its own is one line: `return ctx.fail(status.error());`.
#pragma once

#include "command.hpp"
#include "support/residency_report.hpp"

#include <ballast/derive.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/model.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ballast::cli {

class CommandContext {
 public:
  explicit CommandContext(std::string command) : command_(std::move(command)) {}
  CommandContext(const CommandContext&) = delete;
  CommandContext& operator=(const CommandContext&) = delete;

  // "ballast <command>: <what>" as one line on stderr (support/model.hpp's
  // report_error); the run goes on.
  void report(const Error& error) const;
  // Reports and returns `code`, which exit_code() then gives too.
  int fail(const Error& error, int code = kExitBadInput);
  // The same for a failure of the CLI's own: an Error of `kind`, so every
  // line says its code as a library error's does.
  int fail(ErrorCode kind, std::string_view message, int code = kExitBadInput);
  // Every line reported from here on says `who` too ("while rank 1 of 2"):
  // the processes of an MPI job print side by side.
  void set_who(std::string who) { who_ = std::move(who); }
  // kExitOk until a step or fail() failed; then that failure's code.
  int exit_code() const noexcept { return exit_code_; }
  // The last library Error fail() reported (a step's), for passing on:
  // the ranks of a cooperative load tell their peers why they stopped.
  const std::optional<Error>& last_error() const noexcept { return last_error_; }

  // The steps. Each returns false once it has reported why (exit_code() is
  // then kExitBadInput); on success its result is held here.
  bool load_model(const std::filesystem::path& path, const LoadOptions& load = {});
  bool plan_derivations(double max_amplification);  // after load_model
  // The same with every plan option; skips are kept (skipped()), not errors.
  bool plan_derivations(PlanOptions options);
  bool open_backend(const std::string& config);

  Model& model() { return *model_; }
  std::vector<PlannedDerivation>& plan() { return plan_; }
  const std::vector<PlanSkip>& skipped() const { return skipped_; }
  GpuBackend& gpu() { return *gpu_; }

  // The end of a command that held device resources and tore them down
  // (`check`). With `doc` (--json) the document gains derive's "teardown",
  // "device_after_teardown" and "error" keys and is printed; otherwise the
  // teardown lines are. Returns the exit code: `failure` reported with
  // `failure_code`, else 1 when the device is not back at its baseline,
  // else 0.
  int finish(const Status& failure, const TeardownCheck& check, nlohmann::ordered_json* doc,
             int failure_code = kExitBadInput);

 private:
  std::string command_;
  std::string who_;
  int exit_code_ = kExitOk;
  std::optional<Error> last_error_;
  // Declared before the backend: the backend closes first, as when each
  // command declared the model before it.
  std::optional<Model> model_;
  std::vector<PlannedDerivation> plan_;
  std::vector<PlanSkip> skipped_;
  std::unique_ptr<GpuBackend> gpu_;
};

}  // namespace ballast::cli
