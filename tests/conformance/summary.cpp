#include "conformance/summary.hpp"

#include <ballast/backend_registry.hpp>
#include <ballast/plugin_api.h>
#include <ballast/version.hpp>

#include <doctest/doctest.h>

#include <mutex>
#include <sstream>
#include <string_view>

namespace conformance {
namespace {

// Tests that do not apply to a backend log MESSAGE("skipped: <reason>")
// and return; this prefix is how the summary tells them from passes.
constexpr std::string_view kSkipPrefix = "skipped: ";

std::mutex g_mutex;  // asserts may fail on several threads at once (test_threads)
std::vector<CaseOutcome> g_outcomes;

std::string base_name(const char* file) {
  const std::string_view f = file != nullptr ? file : "?";
  const auto slash = f.find_last_of('/');
  return std::string(slash == std::string_view::npos ? f : f.substr(slash + 1));
}

class Listener final : public doctest::IReporter {
 public:
  explicit Listener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& d) override {
    std::lock_guard lock(g_mutex);
    current_ = CaseOutcome{d.m_name, CaseOutcome::State::passed, {}};
    skip_reason_.clear();
    subcases_.clear();
  }
  // Each pass through a case's subcases starts at the top again (an
  // exception may have left the previous pass's stack behind).
  void test_case_reenter(const doctest::TestCaseData&) override {
    std::lock_guard lock(g_mutex);
    subcases_.clear();
  }
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    std::lock_guard lock(g_mutex);
    if (stats.failure_flags != 0 || !current_.messages.empty()) {
      current_.state = CaseOutcome::State::failed;
      if (current_.messages.empty()) current_.messages.push_back("failed (doctest failure flags " +
                                                                  std::to_string(stats.failure_flags) + ")");
    } else if (!skip_reason_.empty()) {
      current_.state = CaseOutcome::State::skipped;
      current_.messages.push_back(skip_reason_);
    }
    g_outcomes.push_back(std::move(current_));
  }
  void test_case_exception(const doctest::TestCaseException& e) override {
    std::lock_guard lock(g_mutex);
    current_.messages.push_back(std::string("exception: ") + e.error_string.c_str());
  }
  void subcase_start(const doctest::SubcaseSignature& s) override {
    std::lock_guard lock(g_mutex);
    subcases_.emplace_back(s.m_name.c_str());
  }
  void subcase_end() override {
    std::lock_guard lock(g_mutex);
    if (!subcases_.empty()) subcases_.pop_back();
  }
  void log_assert(const doctest::AssertData& a) override {
    if (!a.m_failed) return;
    std::lock_guard lock(g_mutex);
    std::ostringstream m;
    m << base_name(a.m_file) << ':' << a.m_line << ": ";
    for (const auto& s : subcases_) m << '[' << s << "] ";
    m << a.m_expr;
    if (a.m_threw) m << " threw: " << a.m_exception.c_str();
    else if (a.m_decomp.size() > 0) m << " (values: " << a.m_decomp.c_str() << ')';
    // CHECK_MESSAGE / INFO text: the part that says what went wrong.
    for (int i = 0; i < doctest::IReporter::get_num_active_contexts(); ++i) {
      std::ostringstream c;
      doctest::IReporter::get_active_contexts()[i]->stringify(&c);
      m << " -- " << c.str();
    }
    current_.messages.push_back(m.str());
  }
  void log_message(const doctest::MessageData& msg) override {
    const std::string text = msg.m_string.c_str();
    std::lock_guard lock(g_mutex);
    if ((msg.m_severity & (doctest::assertType::is_check | doctest::assertType::is_require)) != 0) {
      current_.messages.push_back(base_name(msg.m_file) + ':' + std::to_string(msg.m_line) + ": " + text);
    } else if (text.rfind(kSkipPrefix, 0) == 0) {
      skip_reason_ = text.substr(kSkipPrefix.size());
    }
  }
  void test_case_skipped(const doctest::TestCaseData&) override {}  // filtered out by -tc: not run, not listed

 private:
  CaseOutcome current_;
  std::string skip_reason_;
  std::vector<std::string> subcases_;
};

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

const char* state_name(CaseOutcome::State s) {
  switch (s) {
    case CaseOutcome::State::passed: return "passed";
    case CaseOutcome::State::failed: return "failed";
    case CaseOutcome::State::skipped: return "skipped";
  }
  return "?";
}

const char* result_name(const RunSummary& run) {
  if (!run.skipped.empty()) return "skipped";
  return run.exit_code == 0 ? "passed" : "failed";
}

void print_json(const RunSummary& run, const std::vector<CaseOutcome>& cases, std::FILE* out) {
  std::string j = "{\n  \"backend\": " + json_string(run.config);
  j += ",\n  \"ballast_version\": " + json_string(BALLAST_VERSION_STRING);
  // The plugin ABI replaced the build fingerprint: compatibility is by version.
  j += ",\n  \"plugin_abi\": " + json_string(std::to_string(BALLAST_PLUGIN_API_MAJOR) + "." +
                                             std::to_string(BALLAST_PLUGIN_API_MINOR));
  if (run.device) {
    const auto& d = *run.device;
    j += ",\n  \"device\": {\"backend\": " + json_string(d.backend) + ", \"index\": " + std::to_string(d.index) +
         ", \"name\": " + json_string(d.name) + ", \"uuid\": " + json_string(d.uuid) +
         ", \"memory_bytes\": " + std::to_string(d.memory_bytes) + ", \"driver\": " + json_string(d.driver) + "}";
  } else {
    j += ",\n  \"device\": null";
  }
  j += ",\n  \"result\": " + json_string(result_name(run));
  j += ",\n  \"reason\": " + json_string(!run.skipped.empty() ? run.skipped : run.open_error);
  j += ",\n  \"leaks\": " + json_string(run.leaks);
  std::size_t counts[3] = {0, 0, 0};
  j += ",\n  \"cases\": [";
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    counts[static_cast<int>(c.state)] += 1;
    j += std::string(i == 0 ? "\n" : ",\n") + "    {\"name\": " + json_string(c.name) +
         ", \"state\": " + json_string(state_name(c.state)) + ", \"messages\": [";
    for (std::size_t k = 0; k < c.messages.size(); ++k) j += (k == 0 ? "" : ", ") + json_string(c.messages[k]);
    j += "]}";
  }
  j += cases.empty() ? "]" : "\n  ]";
  j += ",\n  \"passed\": " + std::to_string(counts[0]) + ", \"failed\": " + std::to_string(counts[1]) +
       ", \"skipped\": " + std::to_string(counts[2]) + "\n}\n";
  std::fputs(j.c_str(), out);
}

void print_text(const RunSummary& run, const std::vector<CaseOutcome>& cases, std::FILE* out) {
  std::size_t counts[3] = {0, 0, 0};
  for (const auto& c : cases) counts[static_cast<int>(c.state)] += 1;
  std::fprintf(out, "\n==== ballast conformance summary (paste this into a bug report) ====\n");
  std::fprintf(out, "backend:  %s\n", run.config.c_str());
  if (run.device) {
    const auto& d = *run.device;
    std::fprintf(out, "device:   %s device %d: %s\n", d.backend.c_str(), d.index, d.name.c_str());
    std::fprintf(out, "uuid:     %s\n", d.uuid.c_str());
    std::fprintf(out, "memory:   %llu bytes\n", static_cast<unsigned long long>(d.memory_bytes));
  } else {
    std::fprintf(out, "device:   (not opened)\n");
  }
  if (run.device) std::fprintf(out, "driver:   %s\n", run.device->driver.empty() ? "(not reported)" : run.device->driver.c_str());
  std::fprintf(out, "ballast:  %s (plugin ABI %d.%d)\n", BALLAST_VERSION_STRING, BALLAST_PLUGIN_API_MAJOR,
               BALLAST_PLUGIN_API_MINOR);
  if (!run.skipped.empty()) std::fprintf(out, "skipped:  %s\n", run.skipped.c_str());
  if (!run.open_error.empty()) std::fprintf(out, "error:    %s\n", run.open_error.c_str());
  if (run.device) std::fprintf(out, "cases:    %zu passed, %zu failed, %zu skipped\n", counts[0], counts[1], counts[2]);
  for (const auto& c : cases) {
    if (c.state == CaseOutcome::State::passed) continue;
    std::fprintf(out, "  %s: %s\n", state_name(c.state), c.name.c_str());
    for (const auto& m : c.messages) std::fprintf(out, "    %s\n", m.c_str());
  }
  if (!run.leaks.empty()) std::fprintf(out, "leaks:    %s\n", run.leaks.c_str());
  std::fprintf(out, "result:   %s\n", result_name(run));
}

}  // namespace

std::vector<CaseOutcome> case_outcomes() {
  std::lock_guard lock(g_mutex);
  return g_outcomes;
}

void print_summary(const RunSummary& run, bool json, std::FILE* out) {
  const auto cases = case_outcomes();
  if (json) print_json(run, cases, out);
  else print_text(run, cases, out);
  std::fflush(out);
}

}  // namespace conformance

REGISTER_LISTENER("ballast_conformance_summary", 1, conformance::Listener);
