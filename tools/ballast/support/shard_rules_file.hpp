// `ballast inspect --world N --shard-rules FILE`: shard rules as JSON
// (docs/distributed.md, "Rules files"):
//
//   {"defaults": true,                                       (optional; false: only these rules)
//    "rules": [{"name": "qkv", "pattern": "*.qkv_proj.weight",
//               "split": "column",                           replicated | column | row | vocab
//               "parts": [2048, 512, 512]},                  (optional: a fused weight's parts)
//              {"pattern": "blk.*.attn_qkv.weight", "split": "column", "equal_parts": 3}]}
//
// The file's rules come first and the first match wins, so they override
// the built-in ones, which follow unless "defaults" is false.
#pragma once

#include <ballast/shard.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace ballast::cli {

// The rules to plan with: the file's, then (unless it says otherwise)
// default_shard_rules(). Errors name the file and the rule (by index).
Result<std::vector<ShardRule>> read_shard_rules_file(const std::filesystem::path& file);

// Of the rules that decide no weight (ShardPlan::unmatched_rules), those
// the file gave (not the built-in ones it appends, most of which decide
// nothing in any one model): a note for each, so a misspelt or shadowed
// rule is seen.
void note_unmatched_file_rules(const std::vector<std::string>& unmatched, const std::string& command);

}  // namespace ballast::cli
