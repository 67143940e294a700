// Names for nodes the file leaves unnamed, or names twice. NodeProto.name is
// optional (many exporters, and onnx.helper, leave it empty) and need not be
// unique, yet every report, dump file and error names things by their node;
// so the node table gives each node a unique name once, here, and every
// consumer reads NodeInfo::name.
//
// The rule (docs/derivations.md, "Node names"): the first node with a given
// name keeps it; an unnamed node at position i of Model::nodes() is
// "<op_type>#<i>" ("node" when the op type is empty too), and a later node
// that repeats a name is "<name>#2". Should a name so made be one the file
// gives a node, or one made before it, "#2", "#3", ... is appended until it
// is not.
#pragma once

#include <ballast/onnx_loader.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ballast::onnx {

// "<op_type>#<index>": the name the rule gives an unnamed node, before any
// collision suffix. Also what errors raised while the model is opened (the
// node table is not built yet) call an unnamed node.
std::string generated_node_name(std::string_view op_type, std::size_t index);

// Points every unnamed node of `nodes` (in Model::nodes() order), and every
// node after the first with a given name, at a made name, kept in `storage`;
// other nodes are left as they are. `storage` is replaced, and must not be
// resized while the views are used.
void name_nodes(std::vector<NodeInfo>& nodes, std::vector<std::string>& storage);

}  // namespace ballast::onnx
