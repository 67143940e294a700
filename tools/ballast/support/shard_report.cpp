#include "support/shard_report.hpp"

#include "support/format.hpp"

#include <ballast/printable.hpp>

#include <ostream>

namespace ballast::cli {

namespace {

using json = nlohmann::ordered_json;

// Ranks differ only in where their slice lies: the split, axis, dims and
// bytes are every rank's (splits are even), so they are listed once.
json weight_json(const ShardPlans& plans, std::size_t i) {
  const WeightShard& first = plans.ranks.front().weights[i];
  json e;
  e["name"] = first.weight;
  e["split"] = std::string(shard_split_name(first.split));
  e["rule"] = first.rule.empty() ? json(nullptr) : json(first.rule);
  e["layout"] = first.layout;
  e["axis"] = first.axis < 0 ? json(nullptr) : json(first.axis);
  e["parts"] = first.parts;
  e["contiguous"] = first.contiguous();
  e["dims"] = first.dims.to_vector();
  e["device_bytes"] = first.device_bytes;
  e["file_offsets"] = first.mapping.has_value();  // false: offsets within the weight's inline bytes
  json ranks = json::array();
  for (const ShardPlan& plan : plans.ranks) {
    const WeightShard& s = plan.weights[i];
    json r;
    json ranges = json::array();
    for (const ByteRange& b : s.ranges) ranges.push_back({b.offset, b.length});
    r["ranges"] = std::move(ranges);
    json views = json::array();
    for (const StridedView& v : s.strided)
      views.push_back({{"offset", v.offset}, {"row_bytes", v.row_bytes}, {"row_stride", v.row_stride}, {"rows", v.rows}});
    r["strided"] = std::move(views);
    ranks.push_back(std::move(r));
  }
  e["ranks"] = std::move(ranks);
  return e;
}

}  // namespace

json shard_plans_json(const ShardPlans& plans, const CooperativeLoadPlan& load, const std::string& rules) {
  json doc;
  doc["world"] = plans.ranks.size();
  doc["rules"] = rules;
  doc["union_bytes"] = plans.union_bytes;
  doc["read_bytes_sum"] = plans.read_bytes_sum;
  doc["unmatched_rules"] = plans.unmatched_rules;
  doc["cooperative"] = {{"domains", load.domains},
                        {"union_bytes", load.union_bytes},
                        {"read_per_rank_bytes", load.read_per_rank_bytes},
                        {"read_everything_bytes", load.read_everything_bytes}};
  json ranks = json::array();
  for (const ShardPlan& p : plans.ranks) {
    const CooperativeRankPlan& c = load.ranks[p.rank];
    ranks.push_back({{"rank", p.rank},
                     {"read_bytes", p.totals.read_bytes},
                     {"device_bytes", p.totals.device_bytes},
                     {"gathered_bytes", p.totals.gathered_bytes},
                     {"not_needed_bytes", p.totals.not_needed_bytes},
                     {"cooperative",
                      {{"domain", c.domain},
                       {"read_bytes", c.read_bytes},
                       {"kept_bytes", c.kept_bytes},
                       {"sent_bytes", c.sent_bytes},
                       {"received_bytes", c.received_bytes},
                       {"inline_bytes", c.inline_bytes}}}});
  }
  doc["ranks"] = std::move(ranks);
  json weights = json::array();
  if (!plans.ranks.empty())
    for (std::size_t i = 0; i < plans.ranks.front().weights.size(); ++i) weights.push_back(weight_json(plans, i));
  doc["weights"] = std::move(weights);
  return doc;
}

void print_shard_plans(std::ostream& out, const ShardPlans& plans, const CooperativeLoadPlan& load, const std::string& rules) {
  out << "\nshard plan: world " << plans.ranks.size() << ", rules " << printable(rules) << '\n';
  // READ: the rank's own shards' bytes (reading alone); the cooperative
  // load's columns: its portion of the union, and what it sends and receives.
  Table ranks({"RANK", "READ", "DEVICE", "GATHERED", "NOT NEEDED", "COOP READ", "SENDS", "RECEIVES"},
              {true, true, true, true, true, true, true, true});
  for (const ShardPlan& p : plans.ranks) {
    const CooperativeRankPlan& c = load.ranks[p.rank];
    ranks.add({std::to_string(p.rank), human_bytes(p.totals.read_bytes), human_bytes(p.totals.device_bytes),
               human_bytes(p.totals.gathered_bytes), human_bytes(p.totals.not_needed_bytes), human_bytes(c.read_bytes),
               human_bytes(c.sent_bytes), human_bytes(c.received_bytes)});
  }
  ranks.print(out, "  ");
  out << "  read by the ranks together: " << human_bytes(plans.read_bytes_sum) << " each reading its own; "
      << human_bytes(load.union_bytes) << " cooperatively ("
      << (load.domains == 1 ? std::string("each byte once")
                            : "each byte once per storage domain, " + std::to_string(load.domains) + " domains")
      << "); " << human_bytes(load.read_everything_bytes) << " each reading everything\n";
  if (plans.ranks.empty()) return;
  out << '\n';
  Table weights({"NAME", "SPLIT", "AXIS", "PARTS", "SHARD", "BYTES/RANK", "READ AS", "RULE", "LAYOUT"},
                {false, false, true, true, false, true, false, false, false});
  for (const WeightShard& s : plans.ranks.front().weights)
    weights.add({s.weight, std::string(shard_split_name(s.split)), s.axis < 0 ? "-" : std::to_string(s.axis),
                 std::to_string(s.parts), shape_string(s.dims), human_bytes(s.device_bytes),
                 s.contiguous() ? "ranges" : "strided", s.rule.empty() ? "-" : s.rule, s.layout});
  weights.print(out, "  ");
}

}  // namespace ballast::cli
