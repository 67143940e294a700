// `ballast derive --rules FILE`: derivation rules as JSON (docs/tools.md):
//
//   {"source": "automatic" | "graph" | "rules" | "graph_and_rules",   (optional)
//    "rules": [{"name": "attention", "pattern": "*.{q,k,v,o}_proj.weight",
//               "derive": ["transpose", "to_f16"], "dtypes": ["float"],  (optional)
//               "unless_present": "lm_head.weight"}]}                     (optional)
#pragma once

#include <ballast/derive.hpp>

#include <filesystem>

namespace ballast::cli {

// Reads FILE into `options.rules` and `options.source`. Errors name the
// file and the rule (by its index and name) that is wrong.
Status read_rules_file(const std::filesystem::path& file, PlanOptions& options);

}  // namespace ballast::cli
