// The engine's side of a plan: which encodings it reads (DerivationPolicy,
// apply_policy) and what it pins together (make_groups and its keys). Pure
// functions of the model and the plan: nothing here touches a device.
#include <ballast/residency.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

namespace ballast {
namespace {

std::uint32_t bit(Derivation kind) { return std::uint32_t{1} << static_cast<unsigned>(kind); }

}  // namespace

DerivationPolicy DerivationPolicy::only(std::initializer_list<Derivation> kinds) {
  DerivationPolicy p;
  p.kinds = 0;
  for (Derivation k : kinds) p.kinds |= bit(k);
  return p;
}

DerivationPolicy DerivationPolicy::none() { return only({}); }

bool DerivationPolicy::wants(const PlannedDerivation& p) const {
  return (kinds & bit(p.kind())) != 0 && (!keep || keep(p));
}

std::vector<PlannedDerivation> apply_policy(std::span<const PlannedDerivation> plan, const DerivationPolicy& policy) {
  std::vector<PlannedDerivation> out;
  for (const PlannedDerivation& p : plan)
    if (policy.wants(p)) out.push_back(p);
  return out;
}

GroupKey group_by_layer(std::string stem) {
  return [stem = std::move(stem)](std::string_view weight, std::string_view) -> std::string {
    if (weight.size() > stem.size() && weight.starts_with(stem)) {
      std::size_t end = stem.size();
      while (end < weight.size() && std::isdigit(static_cast<unsigned char>(weight[end]))) ++end;
      if (end > stem.size() && end < weight.size() && weight[end] == '.') return std::string(weight.substr(0, end + 1));
    }
    return std::string(weight);
  };
}

GroupKey group_by_node() {
  return [](std::string_view weight, std::string_view node) { return std::string(node.empty() ? weight : node); };
}

std::vector<ResidencyGroup> make_groups(const Model& model, std::span<const PlannedDerivation> plan,
                                        const GroupKey& key) {
  // Where in the graph each weight is first read, and by which node: the
  // order groups come in, and the node a weight read as stored is keyed by.
  constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
  std::unordered_map<std::string_view, std::size_t> node_index;
  std::unordered_map<ValueId, std::size_t> first_reader;
  const std::vector<NodeInfo>& nodes = model.nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    node_index.emplace(nodes[i].name, i);
    for (std::string_view input : nodes[i].inputs)
      if (auto id = model.value_id(input); id && model.store().weights().contains(*id)) first_reader.emplace(*id, i);
  }
  auto reader_of = [&](ValueId id) {
    auto it = first_reader.find(id);
    return it == first_reader.end() ? kNever : it->second;
  };

  struct Building {
    ResidencyGroup group;
    std::size_t first_node = kNever;
    std::size_t seen = 0;  // first appearance, the tie-break
  };
  std::map<std::string, Building> by_name;
  auto group_for = [&](std::string name, std::size_t node) -> ResidencyGroup& {
    auto [it, added] = by_name.try_emplace(name);
    if (added) {
      it->second.group.name = std::move(name);
      it->second.seen = by_name.size();
    }
    it->second.first_node = std::min(it->second.first_node, node);
    return it->second.group;
  };

  std::set<ValueId> read_by_plan;
  for (const PlannedDerivation& p : plan) {
    for (const std::optional<ValueId>& id : {std::optional<ValueId>(p.source), p.scales, p.zero_points})
      if (id) read_by_plan.insert(*id);
    auto named = node_index.find(p.node);
    const std::size_t node = named != node_index.end() ? named->second : reader_of(p.source);
    group_for(key(p.weight, p.node), node).derivations.push_back(p);
  }
  for (ValueId id : model.weight_order()) {
    if (read_by_plan.contains(id)) continue;
    const std::size_t node = reader_of(id);
    const std::string_view node_name = node == kNever ? std::string_view() : nodes[node].name;
    group_for(key(model.value_name(id), node_name), node).weights.push_back(id);
  }

  std::vector<Building*> order;
  for (auto& [name, b] : by_name) order.push_back(&b);
  std::sort(order.begin(), order.end(), [](const Building* a, const Building* b) {
    return a->first_node != b->first_node ? a->first_node < b->first_node : a->seen < b->seen;
  });
  std::vector<ResidencyGroup> out;
  out.reserve(order.size());
  for (Building* b : order) out.push_back(std::move(b->group));
  return out;
}

}  // namespace ballast
