#include "support/model.hpp"

#include <ballast/printable.hpp>

#include <iostream>

namespace ballast::cli {

void report_error(std::string_view command, const Error& error) {
  // One line that moves no cursor, whatever the message carries (names
  // and paths may hold newlines and escape sequences).
  // Written whole, in one call: processes of an MPI job share the stream,
  // and a line written in pieces would interleave with theirs.
  const std::string line = "ballast " + printable(command) + ": " + printable(error.to_string()) + '\n';
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  std::cerr.flush();
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
    a.header_bytes = f.header_bytes;
    const std::uint64_t accounted = f.referenced_bytes + f.header_bytes;
    a.unreferenced_bytes = f.mapped_bytes > accounted ? f.mapped_bytes - accounted : 0;
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
  const auto& weights = model.store().weights();
  out.reserve(model.weight_order().size());
  for (ValueId id : model.weight_order()) {
    auto it = weights.find(id);
    if (it == weights.end()) continue;
    out.push_back({model.value_name(id), &it->second});
  }
  return out;
}

}  // namespace ballast::cli
