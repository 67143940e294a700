#include "support/shard_rules_file.hpp"

#include "support/rules_file.hpp"

#include <ballast/printable.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <limits>

namespace ballast::cli {

Result<std::vector<ShardRule>> read_shard_rules_file(const std::filesystem::path& file) {
  auto bad = [&](std::string why) {
    Error e = make_error(ErrorCode::invalid_argument, std::move(why));
    e.file = file.string();
    return e;
  };
  BALLAST_ASSIGN_OR_RETURN(const nlohmann::json doc, read_rules_json(file, "shard rules file"));
  bool defaults = true;
  for (const auto& [key, value] : doc.items()) {
    if (key == "defaults" && value.is_boolean()) defaults = value.get<bool>();
    else if (key != "rules") return bad("unknown key '" + key + "' or a value of the wrong type (expected rules, defaults)");
  }
  if (!doc.contains("rules") || !doc["rules"].is_array()) return bad("\"rules\" is not an array");
  std::vector<ShardRule> rules;
  std::size_t index = 0;
  for (const auto& r : doc["rules"]) {
    const std::string where = "rule " + std::to_string(index++);
    if (!r.is_object()) return bad(where + " is not an object");
    ShardRule rule;
    bool has_split = false;
    for (const auto& [key, value] : r.items()) {
      if (key == "name" && value.is_string()) {
        // Written in a file, an empty name is a mistake, not "no name" (it
        // became "file rule N" unsaid): the plan and the notes name rules by it.
        if (value.get_ref<const std::string&>().empty()) return bad(where + ": \"name\" is empty");
        rule.name = value.get<std::string>();
      } else if (key == "pattern" && value.is_string()) {
        rule.pattern = value.get<std::string>();
      } else if (key == "split" && value.is_string()) {
        auto split = shard_split_from_name(value.get<std::string>());
        if (!split) return bad(where + ": \"split\" '" + value.get<std::string>() + "' is not replicated, column, row or vocab");
        rule.split = *split;
        has_split = true;
      } else if (key == "parts" && value.is_array()) {
        // Written in a file, a list: none is a mistake, not "one part".
        if (value.empty()) return bad(where + ": \"parts\" is empty, not a list of part sizes");
        for (const auto& p : value) {
          if (!p.is_number_unsigned() || p.get<std::uint64_t>() == 0)
            return bad(where + ": \"parts\" holds " + p.dump() + ", not a positive size");
          rule.parts.push_back(p.get<std::uint64_t>());
        }
      } else if (key == "equal_parts" && value.is_number_unsigned() &&
                 value.get<std::uint64_t>() <= std::numeric_limits<std::uint32_t>::max()) {
        // Written in a file, a count: 0 parts is a mistake, not "one part".
        if (value.get<std::uint64_t>() == 0) return bad(where + ": \"equal_parts\" is 0, not a number of parts");
        rule.equal_parts = static_cast<std::uint32_t>(value.get<std::uint64_t>());
      } else {
        return bad(where + ": unknown key '" + key + "' or a value of the wrong type");
      }
    }
    if (rule.pattern.empty()) return bad(where + " has no \"pattern\"");
    if (!has_split) return bad(where + " has no \"split\"");
    if (rule.name.empty()) rule.name = "file rule " + std::to_string(index - 1);
    rules.push_back(std::move(rule));
  }
  if (defaults)
    for (ShardRule& r : default_shard_rules()) rules.push_back(std::move(r));
  if (rules.empty()) return bad("no rules, and \"defaults\" is false");
  return rules;
}

void note_unmatched_file_rules(const std::vector<std::string>& unmatched, const std::string& command) {
  std::vector<std::string> builtin;
  for (const ShardRule& r : default_shard_rules()) builtin.push_back(r.name);
  for (const std::string& name : unmatched)
    if (std::find(builtin.begin(), builtin.end(), name) == builtin.end())
      std::cerr << "ballast " << command << ": note: shard rule '" << printable(name)
                << "' decides no weight of this model (no name matches it before an earlier rule does, "
                   "or only scales and zero points do, which follow their B)\n";
}

}  // namespace ballast::cli
