#include "onnx/node_names.hpp"

#include <unordered_set>

namespace ballast::onnx {

std::string generated_node_name(std::string_view op_type, std::size_t index) {
  std::string name(op_type.empty() ? std::string_view("node") : op_type);
  name += '#';
  name += std::to_string(index);
  return name;
}

void name_nodes(std::vector<NodeInfo>& nodes, std::vector<std::string>& storage) {
  // Every name the file gives, so a made one is unique even against a file
  // that names a later node "MatMul#3"; and which nodes need a made name.
  std::unordered_set<std::string_view> taken;
  std::vector<std::size_t> to_name;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name.empty() || !taken.insert(nodes[i].name).second) to_name.push_back(i);
  if (to_name.empty()) {  // the common case for exporters that name nodes uniquely: no strings
    storage.clear();
    return;
  }
  std::vector<std::string> names;
  names.reserve(to_name.size());  // never reallocated below: `taken` holds views into it
  for (std::size_t i : to_name) {
    const std::string base =
        nodes[i].name.empty() ? generated_node_name(nodes[i].op_type, i) : std::string(nodes[i].name);
    std::string name = base;
    // A repeated given name is itself taken: it starts at #2.
    for (unsigned k = 2; taken.contains(name); ++k) name = base + "#" + std::to_string(k);
    names.push_back(std::move(name));
    taken.insert(names.back());
  }
  for (std::size_t j = 0; j < to_name.size(); ++j) nodes[to_name[j]].name = names[j];
  // Swapping keeps every string where it is (and a short string's bytes
  // with it), so the views just set stay valid.
  storage.swap(names);
}

}  // namespace ballast::onnx
