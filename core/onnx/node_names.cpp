#include "onnx/node_names.hpp"

#include <unordered_set>

namespace ballast::onnx {

std::string generated_node_name(std::string_view op_type, std::size_t index) {
  std::string name(op_type.empty() ? std::string_view("node") : op_type);
  name += '#';
  name += std::to_string(index);
  return name;
}

void name_unnamed_nodes(std::vector<NodeInfo>& nodes, std::vector<std::string>& storage) {
  std::vector<std::string> names;
  std::vector<std::size_t> unnamed;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name.empty()) unnamed.push_back(i);
  if (unnamed.empty()) {  // the common case for exporters that name nodes: no set, no strings
    storage.clear();
    return;
  }
  // Every name in use, given or generated, so a generated one is unique even
  // against a file that names a node "MatMul#3".
  std::unordered_set<std::string_view> taken;
  taken.reserve(nodes.size());
  for (const NodeInfo& n : nodes)
    if (!n.name.empty()) taken.insert(n.name);
  names.reserve(unnamed.size());  // never reallocated below: `taken` holds views into it
  for (std::size_t i : unnamed) {
    const std::string base = generated_node_name(nodes[i].op_type, i);
    std::string name = base;
    for (unsigned k = 2; taken.contains(name); ++k) name = base + "#" + std::to_string(k);
    names.push_back(std::move(name));
    taken.insert(names.back());
  }
  for (std::size_t j = 0; j < unnamed.size(); ++j) nodes[unnamed[j]].name = names[j];
  // Swapping keeps every string where it is (and a short string's bytes
  // with it), so the views just set stay valid.
  storage.swap(names);
}

}  // namespace ballast::onnx
