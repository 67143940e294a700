// `ballast inspect --world N`: the shard plan of every rank as a table and
// as the "shards" key of --json (docs/distributed.md, "inspect --world").
#pragma once

#include <ballast/cooperative_load.hpp>
#include <ballast/shard.hpp>

#include <nlohmann/json.hpp>

#include <iosfwd>
#include <string>

namespace ballast::cli {

// `rules` says where the rules came from ("built-in", or the file's path);
// `load` the cooperative load of the same plans (who reads, sends and
// receives what).
nlohmann::ordered_json shard_plans_json(const ShardPlans& plans, const CooperativeLoadPlan& load, const std::string& rules);
void print_shard_plans(std::ostream& out, const ShardPlans& plans, const CooperativeLoadPlan& load, const std::string& rules);

}  // namespace ballast::cli
