#include "support/rules_file.hpp"

#include <ballast/dtype.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

namespace ballast::cli {

namespace {

std::optional<Derivation> derivation_called(std::string_view name) {
  for (int k = 0; k < kDerivationCount; ++k)
    if (derivation_name(static_cast<Derivation>(k)) == name) return static_cast<Derivation>(k);
  return std::nullopt;
}

// A type by ballast's name (float, q4_k) or by GGUF's (F32, Q4_K), which
// `inspect` prints for a GGUF model's weights.
std::optional<DataType> dtype_called(std::string_view name) {
  if (auto t = dtype_from_name(name)) return t;
  for (std::uint32_t id = 0; id < 64; ++id)
    if (auto t = dtype_from_gguf_type(id); t && dtype_gguf_name(*t) == name) return t;
  return std::nullopt;
}

}  // namespace

Result<nlohmann::json> read_rules_json(const std::filesystem::path& file, const std::string& what) {
  auto fail = [&](ErrorCode code, std::string why) {
    Error e = make_error(code, std::move(why));
    e.file = file.string();
    return e;
  };
  std::ifstream in(file, std::ios::binary);
  if (!in) return fail(ErrorCode::not_found, "cannot open the " + what);
  std::ostringstream text;
  text << in.rdbuf();
  // A key written twice in one object: JSON leaves it open and the parser
  // keeps the last, so a rule would silently mean its second line.
  std::vector<std::set<std::string>> keys;  // one set per object being read
  std::optional<std::string> twice;
  const nlohmann::json::parser_callback_t callback = [&](int, nlohmann::json::parse_event_t event,
                                                         nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start)
      keys.emplace_back();
    else if (event == E::object_end && !keys.empty())
      keys.pop_back();
    else if (event == E::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second && !twice)
      twice = parsed.get<std::string>();
    return true;
  };
  nlohmann::json doc = nlohmann::json::parse(text.str(), callback, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return fail(ErrorCode::invalid_argument, "not valid JSON");
  if (twice) return fail(ErrorCode::invalid_argument, "the key '" + *twice + "' appears twice in one object");
  if (!doc.is_object()) return fail(ErrorCode::invalid_argument, "not a JSON object with \"rules\"");
  return doc;
}

Status read_rules_file(const std::filesystem::path& file, PlanOptions& options) {
  auto bad = [&](std::string why) {
    Error e = make_error(ErrorCode::invalid_argument, std::move(why));
    e.file = file.string();
    return Status(std::move(e));
  };
  auto parsed = read_rules_json(file, "rules file");
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& doc = *parsed;
  for (const auto& [key, value] : doc.items())
    if (key != "rules" && key != "source") return bad("unknown key '" + key + "' (expected rules, source)");
  if (doc.contains("source")) {
    const auto& s = doc["source"];
    if (!s.is_string()) return bad("\"source\" is not a string");
    const std::string v = s.get<std::string>();
    if (v == "automatic") options.source = PlanSource::automatic;
    else if (v == "graph") options.source = PlanSource::graph;
    else if (v == "rules") options.source = PlanSource::rules;
    else if (v == "graph_and_rules") options.source = PlanSource::graph_and_rules;
    else return bad("\"source\" '" + v + "' is not automatic, graph, rules or graph_and_rules");
  }
  if (!doc.contains("rules") || !doc["rules"].is_array()) return bad("\"rules\" is not an array");
  std::size_t index = 0;
  for (const auto& r : doc["rules"]) {
    const std::string where = "rule " + std::to_string(index++);
    if (!r.is_object()) return bad(where + " is not an object");
    DerivationRule rule;
    for (const auto& [key, value] : r.items()) {
      if (key == "name" && value.is_string()) rule.name = value.get<std::string>();
      else if (key == "pattern" && value.is_string()) rule.pattern = value.get<std::string>();
      else if (key == "unless_present" && value.is_string()) rule.unless_present = value.get<std::string>();
      else if (key == "derive" && value.is_array()) {
        for (const auto& d : value) {
          auto kind = d.is_string() ? derivation_called(d.get<std::string>()) : std::nullopt;
          if (!kind) return bad(where + ": \"derive\" holds " + d.dump() + ", not a derivation name");
          rule.derivations.push_back(*kind);
        }
      } else if (key == "dtypes" && value.is_array()) {
        for (const auto& d : value) {
          auto type = d.is_string() ? dtype_called(d.get<std::string>()) : std::nullopt;
          if (!type)
            return bad(where + ": \"dtypes\" holds " + d.dump() +
                       ", not a type name (float, float16, q4_k, Q4_K, ...)");
          rule.dtypes.push_back(*type);
        }
      } else {
        return bad(where + ": unknown key '" + key + "' or a value of the wrong type");
      }
    }
    if (rule.pattern.empty()) return bad(where + " has no \"pattern\"");
    if (rule.derivations.empty()) return bad(where + " has no \"derive\" list");
    if (rule.name.empty()) rule.name = std::to_string(index - 1);
    options.rules.push_back(std::move(rule));
  }
  return {};
}

std::string plan_skip_subject(const PlanSkip& s) {
  return (s.rule.empty() ? "node " + s.node : "rule " + s.rule) + (s.weight.empty() ? "" : " on " + s.weight);
}

}  // namespace ballast::cli
