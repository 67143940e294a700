#include "support/model.hpp"

#include <iostream>

namespace ballast::cli {

void report_error(std::string_view command, const Error& error) {
  std::string line = error.to_string();
  // One line, whatever the message carries (paths may hold newlines).
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::cerr << "ballast " << command << ": " << line << '\n';
}

std::vector<FileAccounting> account_external_files(const WeightStore& store) {
  const ReferencedWeightBytes referenced = store.referenced_weight_bytes();
  const std::vector<DeadRanges> dead = store.dead_ranges(referenced);
  std::vector<FileAccounting> out;
  out.reserve(referenced.files.size());
  for (const auto& f : referenced.files) {
    FileAccounting a;
    a.mapping = f.mapping;
    a.path = f.path;
    a.mapped_bytes = f.mapped_bytes;
    a.referenced_bytes = f.referenced_bytes;
    a.unreferenced_bytes = f.mapped_bytes > f.referenced_bytes ? f.mapped_bytes - f.referenced_bytes : 0;
    a.referenced_ranges = f.ranges;
    for (const auto& d : dead) {
      if (d.mapping == f.mapping) a.dead_ranges = d.ranges;
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<NamedWeight> weights_in_order(const Model& model) {
  std::vector<NamedWeight> out;
  const auto& weights = model.store().weights;
  out.reserve(model.weight_order().size());
  for (ValueId id : model.weight_order()) {
    auto it = weights.find(id);
    if (it == weights.end()) continue;
    out.push_back({model.value_name(id), &it->second});
  }
  return out;
}

}  // namespace ballast::cli
