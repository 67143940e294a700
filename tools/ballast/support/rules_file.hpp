// `ballast derive --rules FILE`: derivation rules as JSON (docs/tools.md):
//
//   {"source": "automatic" | "graph" | "rules" | "graph_and_rules",   (optional)
//    "rules": [{"name": "attention", "pattern": "*.{q,k,v,o}_proj.weight",
//               "derive": ["transpose", "to_f16"], "dtypes": ["float"],  (optional)
//               "unless_present": "lm_head.weight"}]}                     (optional)
#pragma once

#include <ballast/derive.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace ballast::cli {

// A rules file's JSON object (derivation rules here, shard rules in
// shard_rules_file.cpp): not_found "cannot open the <what>", or
// invalid_argument "not valid JSON" / "not a JSON object with "rules"",
// each naming the file.
Result<nlohmann::json> read_rules_json(const std::filesystem::path& file, const std::string& what);

// Reads FILE into `options.rules` and `options.source`. Errors name the
// file and the rule (by its index and name) that is wrong.
Status read_rules_file(const std::filesystem::path& file, PlanOptions& options);

// What a plan skip is about, as derive's plan lines and the ranks' notes
// name it: "rule R on W", or "node N on W" for the graph's (raw: escape it
// to show it).
std::string plan_skip_subject(const PlanSkip& s);

}  // namespace ballast::cli
