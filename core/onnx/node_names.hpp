// Names for nodes the file leaves unnamed. NodeProto.name is optional and
// many exporters (and onnx.helper) leave it empty, yet every report, dump
// file and error names things by their node; so the node table gives each
// unnamed node a name once, here, and every consumer reads NodeInfo::name.
//
// The rule (docs/derivations.md, "Node names"): a node with a name keeps it;
// an unnamed node at position i of Model::nodes() is "<op_type>#<i>" ("node"
// when the op type is empty too). Should that collide with a name the file
// gives another node, "#2", "#3", ... is appended until it does not.
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

// Points every unnamed node of `nodes` (in Model::nodes() order) at a
// generated name, kept in `storage`; named nodes are left as they are.
// `storage` is replaced, and must not be resized while the views are used.
void name_unnamed_nodes(std::vector<NodeInfo>& nodes, std::vector<std::string>& storage);

}  // namespace ballast::onnx
