#include "command_context.hpp"

#include "support/model.hpp"
#include "support/terminal.hpp"

#include <ballast/backend_registry.hpp>

#include <iostream>

namespace ballast::cli {

void CommandContext::report(const Error& error) const {
  report_error(command_, who_.empty() ? error : Error(error).with_context(who_));
}

int CommandContext::fail(const Error& error, int code) {
  report(error);
  last_error_ = error;
  exit_code_ = code;
  return code;
}

int CommandContext::fail(ErrorCode kind, std::string_view message, int code) {
  return fail(make_error(kind, std::string(message)), code);
}

bool CommandContext::load_model(const std::filesystem::path& path, const LoadOptions& load) {
  Result<Model> loaded = open_model(path, load);
  if (!loaded.ok()) {
    fail(loaded.error());
    return false;
  }
  model_.emplace(std::move(*loaded));
  return true;
}

bool CommandContext::plan_derivations(double max_amplification) {
  PlanOptions options;
  options.max_amplification = max_amplification;
  return plan_derivations(std::move(options));
}

bool CommandContext::plan_derivations(PlanOptions options) {
  skipped_.clear();
  options.skipped = &skipped_;
  auto planned = ballast::plan_derivations(*model_, options);
  if (!planned.ok()) {
    fail(planned.error());
    return false;
  }
  plan_ = std::move(*planned);
  return true;
}

bool CommandContext::open_backend(const std::string& config) {
  auto opened = ballast::open_backend(config);
  if (!opened.ok()) {
    fail(opened.error());
    return false;
  }
  gpu_ = std::move(*opened);
  return true;
}

int CommandContext::finish(const Status& failure, const TeardownCheck& check, nlohmann::ordered_json* doc,
                           int failure_code) {
  if (doc != nullptr) {
    add_teardown_json(*doc, check);
    (*doc)["error"] = failure.ok() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(failure.error().to_string());
    std::cout << json_text(*doc) << '\n';
  } else {
    print_teardown(std::cout, check);
  }
  if (!failure.ok()) return fail(failure.error(), failure_code);
  // A command that finished its work but leaked on the device failed a check, not its input.
  if (!check.back_to_baseline())
    return fail(ErrorCode::internal, "teardown did not return the device to its baseline", kExitVerifyFailed);
  return kExitOk;
}

}  // namespace ballast::cli
