#include "onnx/graph_decoder.hpp"

#include "onnx/inline_data.hpp"
#include "onnx/node_names.hpp"
#include "store/store_access.hpp"

#include <cstring>

namespace ballast::onnx {

namespace {

// Field numbers from onnx.proto.
namespace model_field {
constexpr std::uint32_t kIrVersion = 1, kGraph = 7, kOpsetImport = 8, kFunctions = 25;
}
namespace function_field {
constexpr std::uint32_t kName = 1, kNode = 7, kDomain = 10;
}
namespace opset_field {
constexpr std::uint32_t kDomain = 1, kVersion = 2;
}
namespace graph_field {
constexpr std::uint32_t kNode = 1, kInitializer = 5, kInput = 11, kSparseInitializer = 15;
}
namespace value_info_field {
constexpr std::uint32_t kName = 1;
}
namespace node_field {
constexpr std::uint32_t kInput = 1, kOutput = 2, kName = 3, kOpType = 4, kAttribute = 5, kDomain = 7;
}
namespace attr_field {
constexpr std::uint32_t kName = 1, kF = 2, kI = 3, kS = 4, kT = 5, kG = 6, kFloats = 7, kInts = 8, kStrings = 9,
                        kTensors = 10, kGraphs = 11, kType = 20, kSparseTensor = 22;
}
namespace sparse_field {
constexpr std::uint32_t kValues = 1;
}
constexpr std::int64_t kAttrTypeInt = 2, kAttrTypeInts = 7;

// The scalar parts of an AttributeProto; repeated parts are re-read from
// `message` when needed.
struct Attribute {
  WireField message;
  std::string_view name;
  std::int64_t type = 0;
  std::optional<std::int64_t> i;
  std::optional<std::uint32_t> f_bits;
  std::optional<WireField> t;
  std::optional<WireField> sparse_tensor;
  std::uint64_t strings = 0;
  bool has_s = false;
  bool has_graphs = false;  // g or graphs: subgraphs to walk
  bool has_ints = false;
};

Result<Attribute> scan_attribute(const WireField& message) {
  Attribute a;
  a.message = message;
  WireReader reader(message.payload, message.payload_offset);
  while (!reader.at_end()) {
    WireField f;
    if (!reader.next(f)) return reader.error();
    Status s;
    switch (f.number) {
      case attr_field::kName:
        s = expect_wire_type(f, WireType::len, "AttributeProto.name");
        a.name = f.text();
        break;
      case attr_field::kF:
        s = expect_wire_type(f, WireType::fixed32, "AttributeProto.f");
        a.f_bits = static_cast<std::uint32_t>(f.value);
        break;
      case attr_field::kI:
        s = expect_wire_type(f, WireType::varint, "AttributeProto.i");
        a.i = static_cast<std::int64_t>(f.value);
        break;
      case attr_field::kS:
        s = expect_wire_type(f, WireType::len, "AttributeProto.s");
        a.has_s = true;
        break;
      case attr_field::kT:
        s = expect_wire_type(f, WireType::len, "AttributeProto.t");
        a.t = f;
        break;
      case attr_field::kG:
        s = expect_wire_type(f, WireType::len, "AttributeProto.g");
        a.has_graphs = true;
        break;
      case attr_field::kFloats:
        if (f.type != WireType::len) s = expect_wire_type(f, WireType::fixed32, "AttributeProto.floats");
        break;
      case attr_field::kInts:
        if (f.type != WireType::len) s = expect_wire_type(f, WireType::varint, "AttributeProto.ints");
        a.has_ints = true;
        break;
      case attr_field::kStrings:
        s = expect_wire_type(f, WireType::len, "AttributeProto.strings");
        ++a.strings;
        break;
      case attr_field::kTensors: s = expect_wire_type(f, WireType::len, "AttributeProto.tensors"); break;
      case attr_field::kGraphs:
        s = expect_wire_type(f, WireType::len, "AttributeProto.graphs");
        a.has_graphs = true;
        break;
      case attr_field::kType:
        s = expect_wire_type(f, WireType::varint, "AttributeProto.type");
        a.type = static_cast<std::int64_t>(f.value);
        break;
      case attr_field::kSparseTensor:
        s = expect_wire_type(f, WireType::len, "AttributeProto.sparse_tensor");
        a.sparse_tensor = f;
        break;
      default: break;
    }
    if (!s.ok()) return s;
  }
  return a;
}

// An attribute's ints, packed or not, appended to `out`; false when a
// packed run is not whole varints (the loader checks wire types only).
bool read_ints(const WireField& message, std::vector<std::int64_t>& out) {
  WireReader reader(message.payload, message.payload_offset);
  WireField f;
  while (!reader.at_end()) {
    if (!reader.next(f)) return false;
    if (f.number != attr_field::kInts) continue;
    if (f.type == WireType::varint) {
      out.push_back(static_cast<std::int64_t>(f.value));
      continue;
    }
    for (std::size_t pos = 0; pos < f.payload.size();) {
      std::uint64_t v = 0;
      if (!read_varint(f.payload, pos, v)) return false;
      out.push_back(static_cast<std::int64_t>(v));
    }
  }
  return true;
}

bool is_constant_op(std::string_view op_type, std::string_view domain) {
  return op_type == "Constant" && (domain.empty() || domain == "ai.onnx");
}

bool is_constant_value_attribute(std::string_view name) {
  return name == "value" || name == "value_float" || name == "value_floats" || name == "value_int" ||
         name == "value_ints" || name == "value_string" || name == "value_strings" || name == "sparse_value";
}

std::shared_ptr<const std::vector<std::byte>> owned_bytes(const void* data, std::size_t size) {
  auto v = std::make_shared<std::vector<std::byte>>(size);
  if (size != 0) std::memcpy(v->data(), data, size);
  return v;
}

std::shared_ptr<const std::vector<std::byte>> owned_int64_le(std::int64_t value) {
  std::byte bytes[8];
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<std::byte>((static_cast<std::uint64_t>(value) >> (8 * k)) & 0xffu);
  return owned_bytes(bytes, 8);
}

// "'a', 'b', 'c' and N more": the first three of `count` names, for a note
// that stands for many (a note each would bury the others).
template <class NameOf>
std::string first_named(std::size_t count, NameOf name_of) {
  constexpr std::size_t kNamed = 3;
  std::string named;
  for (std::size_t i = 0; i < count && i < kNamed; ++i)
    named += std::string(i == 0 ? "'" : ", '") + std::string(name_of(i)) + "'";
  if (count > kNamed) named += " and " + std::to_string(count - kNamed) + " more";
  return named;
}

}  // namespace

ModelDecoder::ModelDecoder(Model::Impl& model, std::string model_file, std::filesystem::path model_dir,
                           const LoadOptions& options, std::optional<store::Root> real_model_dir)
    : model_(model),
      model_file_(model_file),
      external_(std::move(model_dir), model_file, options, model.store, std::move(real_model_dir)),
      tensors_(std::move(model_file), options, external_, model.notes) {}

Error ModelDecoder::error_at(ErrorCode code, std::string message, std::string_view tensor,
                             std::uint64_t offset) const {
  Error e = make_error(code, std::move(message));
  e.file = model_file_;
  e.tensor = std::string(tensor);
  e.offset = offset;
  return e;
}

Status ModelDecoder::decode(Bytes bytes) {
  WireReader reader(bytes, 0);
  while (!reader.at_end()) {
    WireField f;
    if (!reader.next(f)) return reader.error();
    switch (f.number) {
      case model_field::kIrVersion:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::varint, "ModelProto.ir_version"));
        model_.ir_version = static_cast<std::int64_t>(f.value);
        break;
      case model_field::kOpsetImport: {
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "ModelProto.opset_import"));
        std::pair<std::string, std::int64_t> opset;
        WireReader op(f.payload, f.payload_offset);
        while (!op.at_end()) {
          BALLAST_ASSIGN_OR_RETURN(auto g, op.next());
          if (g.number == opset_field::kDomain) {
            BALLAST_RETURN_IF_ERROR(expect_wire_type(g, WireType::len, "OperatorSetIdProto.domain"));
            opset.first = std::string(g.text());
          } else if (g.number == opset_field::kVersion) {
            BALLAST_RETURN_IF_ERROR(expect_wire_type(g, WireType::varint, "OperatorSetIdProto.version"));
            opset.second = static_cast<std::int64_t>(g.value);
          }
        }
        model_.opsets.push_back(std::move(opset));
        break;
      }
      case model_field::kGraph:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "ModelProto.graph"));
        BALLAST_RETURN_IF_ERROR(decode_graph(f, 0));
        break;
      case model_field::kFunctions: {
        // Not inlined, so not read: counted, so the planner can say what it
        // does not see (docs/derivations.md, "Model-local functions").
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "ModelProto.functions"));
        ModelFunction function;
        // A body that is not well-formed ends the count (it never failed a
        // load before functions were counted, and is not read either way).
        WireReader body(f.payload, f.payload_offset);
        WireField g;
        while (!body.at_end() && body.next(g)) {
          if (g.number == function_field::kNode)
            ++function.nodes;
          else if (g.number == function_field::kName && g.type == WireType::len)
            function.name = std::string(g.text());
          else if (g.number == function_field::kDomain && g.type == WireType::len)
            function.domain = std::string(g.text());
        }
        model_.functions.push_back(std::move(function));
        break;
      }
      default: break;  // producer, metadata, training info
    }
  }
  note_overridable_initializers();
  note_functions();
  return {};
}

// Model-local functions are counted, not read (docs/derivations.md): one
// note says so where a person looks (inspect, the C API, Python), because a
// Constant inside one is no weight and the external bytes it references are
// then counted as dead (and `compact` refuses to drop them).
void ModelDecoder::note_functions() {
  const auto& functions = model_.functions;
  if (functions.empty()) return;
  auto shown = [](const ModelFunction& f) { return f.domain.empty() ? f.name : f.domain + ":" + f.name; };
  const std::string named = first_named(functions.size(), [&](std::size_t i) { return shown(functions[i]); });
  std::uint64_t nodes = 0;
  for (const ModelFunction& f : functions) nodes += f.nodes;
  model_.notes.push_back(
      {shown(functions.front()),
       (functions.size() == 1 ? std::string("a model-local function (")
                              : std::to_string(functions.size()) + " model-local functions (") +
           named + ", " + std::to_string(nodes) + (nodes == 1 ? " node" : " nodes") +
           " in all): ballast does not read their nodes, so a weight passed to a call is planned for no "
           "derivation inside it, and a Constant inside one is no weight (external bytes it references count as "
           "dead)"});
}

// From IR version 4 an initializer named like a graph input is that input's
// default, which the caller may feed instead (ONNX Runtime then does not
// treat it as a constant); up to IR version 3 every initializer had to be an
// input and is a constant. Loaded as a weight either way (its bytes are the
// default), and said, so an engine that lets callers feed it knows which.
// One note for all of them, on the first (torch's keep_initializers_as_inputs
// makes every weight one: a note each would bury the others).
void ModelDecoder::note_overridable_initializers() {
  if (model_.ir_version < 4) return;
  const auto& weights = store::StoreAccess::weights(model_.store);
  std::vector<std::string_view> found;
  for (std::string_view input : main_graph_inputs_) {
    const auto id = model_.names.find(input);
    if (!id) continue;
    const auto it = weights.find(ValueId{*id});
    if (it == weights.end() || it->second.source != WeightSource::initializer) continue;
    found.push_back(input);
  }
  if (found.empty()) return;
  const std::string named = first_named(found.size(), [&](std::size_t i) { return found[i]; });
  model_.notes.push_back(
      {std::string(found.front()),
       found.size() == 1
           ? std::string("initializer is also a graph input: from IR version 4 that makes it the input's default, "
                         "which a caller may override; loaded as a weight holding the default (ballast plans "
                         "derivations from it as from any weight)")
           : std::to_string(found.size()) + " initializers are also graph inputs (" + named +
                 "): from IR version 4 that makes each the input's default, which a caller may override; loaded "
                 "as weights holding the defaults (ballast plans derivations from them as from any weight)"});
}

Status ModelDecoder::decode_graph(const WireField& graph, unsigned depth) {
  if (depth > kMaxGraphDepth)
    return error_at(ErrorCode::malformed, "subgraphs nested deeper than " + std::to_string(kMaxGraphDepth) + " levels",
                    "", graph.offset);
  const WeightSource source = depth == 0 ? WeightSource::initializer : WeightSource::subgraph;
  if (depth == 0) reserve_for(graph);
  WireReader reader(graph.payload, graph.payload_offset);
  while (!reader.at_end()) {
    WireField f;
    if (!reader.next(f)) return reader.error();
    switch (f.number) {
      case graph_field::kNode:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "GraphProto.node"));
        BALLAST_RETURN_IF_ERROR(decode_node(f, depth));
        break;
      case graph_field::kInitializer:
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "GraphProto.initializer"));
        BALLAST_RETURN_IF_ERROR(add_tensor(f, source, {}));
        break;
      case graph_field::kSparseInitializer: {
        BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::len, "GraphProto.sparse_initializer"));
        std::string_view name;
        WireReader sparse(f.payload, f.payload_offset);
        while (!sparse.at_end()) {
          BALLAST_ASSIGN_OR_RETURN(auto g, sparse.next());
          if (g.number == sparse_field::kValues && g.type == WireType::len) name = TensorDecoder::name_of(g);
        }
        model_.notes.push_back({std::string(name), "sparse_initializer is not supported: not loaded as a weight"});
        break;
      }
      case graph_field::kInput:
        // The main graph's inputs, for note_overridable_initializers; a
        // subgraph's are its formal parameters.
        if (depth == 0 && f.type == WireType::len) {
          WireReader info(f.payload, f.payload_offset);
          WireField g;
          while (!info.at_end() && info.next(g))
            if (g.number == value_info_field::kName && g.type == WireType::len) main_graph_inputs_.push_back(g.text());
        }
        break;
      default: break;  // name, outputs, value_info, annotations
    }
  }
  return {};
}

// Sizing the tables once up front saves rehashing them as a model with
// tens of thousands of initializers is read (a tag walk: payloads skipped).
void ModelDecoder::reserve_for(const WireField& graph) {
  std::size_t initializers = 0, nodes = 0;
  WireReader reader(graph.payload, graph.payload_offset);
  WireField f;
  while (!reader.at_end() && reader.next(f)) {
    if (f.number == graph_field::kInitializer) ++initializers;
    if (f.number == graph_field::kNode) ++nodes;
  }
  auto& weights = store::StoreAccess::weights(model_.store);
  weights.reserve(weights.size() + initializers);
  model_.weight_order.reserve(model_.weight_order.size() + initializers);
  model_.names.reserve(initializers);
  model_.node_records.reserve(model_.node_records.size() + nodes);
}

// Opening only validates a node and remembers where it is; the NodeInfo
// table is built from these records on first use (build_node_table).
// Constant nodes and nodes with subgraphs are read further now: they hold
// weights. build_node_table reads the same fields (see the note there).
Status ModelDecoder::decode_node(const WireField& node_field, unsigned depth) {
  // Plain locals, not a NodeInfo: zeroing one per node was measurable.
  std::string_view name, op_type, domain;
  bool has_subgraphs = false;
  std::string_view first_output;
  bool seen_output = false;
  WireReader reader(node_field.payload, node_field.payload_offset);
  while (!reader.at_end()) {
    WireField f;
    if (!reader.next(f)) return reader.error();
    // Every known field of a node is length-delimited.
    if (f.type != WireType::len && (f.number == node_field::kInput || f.number == node_field::kOutput ||
                                    f.number == node_field::kName || f.number == node_field::kOpType ||
                                    f.number == node_field::kDomain || f.number == node_field::kAttribute))
      return wire_type_error(f, WireType::len, "NodeProto field");
    switch (f.number) {
      case node_field::kOutput:
        if (!seen_output) first_output = f.text();
        seen_output = true;
        break;
      case node_field::kName: name = f.text(); break;
      case node_field::kOpType: op_type = f.text(); break;
      case node_field::kDomain: domain = f.text(); break;
      case node_field::kAttribute: {
        // Validates every attribute now, so the later table build cannot fail.
        BALLAST_ASSIGN_OR_RETURN(auto attr, scan_attribute(f));
        has_subgraphs = has_subgraphs || attr.has_graphs;
        break;
      }
      default: break;
    }
  }
  const std::size_t index = model_.node_records.size();  // this node's place in Model::nodes()
  model_.node_records.push_back({node_field.payload, node_field.payload_offset, depth});

  // The node goes in before the nodes of its subgraphs: parents first.
  const bool constant = is_constant_op(op_type, domain);
  if (!constant && !has_subgraphs) return {};  // the common case: nothing more to read

  // What errors call this node: the name the node table will give it (an
  // unnamed node's generated name, without the rare collision suffix). Made
  // only when an error needs it: Constant nodes are common.
  auto label = [&] { return name.empty() ? generated_node_name(op_type, index) : std::string(name); };

  // Second pass over the attributes: subgraphs and Constant values, now that
  // the node's op type and outputs are known whatever the field order.
  bool have_value = false;
  WireReader again(node_field.payload, node_field.payload_offset);
  while (!again.at_end()) {
    BALLAST_ASSIGN_OR_RETURN(auto next, again.next());
    if (next.number != node_field::kAttribute) continue;
    BALLAST_ASSIGN_OR_RETURN(auto attr, scan_attribute(next));
    WireReader inner(attr.message.payload, attr.message.payload_offset);
    while (!inner.at_end()) {
      BALLAST_ASSIGN_OR_RETURN(auto g, inner.next());
      if (g.number == attr_field::kG || g.number == attr_field::kGraphs)
        BALLAST_RETURN_IF_ERROR(decode_graph(g, depth + 1), "in subgraph '", attr.name, "' of node '", label(), "' (",
                                op_type, ")");
    }
    if (constant && is_constant_value_attribute(attr.name)) {
      if (have_value)
        return error_at(ErrorCode::malformed, "Constant node has more than one value attribute", first_output,
                        next.offset);
      have_value = true;
      if (first_output.empty())
        return error_at(ErrorCode::malformed, "Constant node without an output", label(), next.offset);
      BALLAST_RETURN_IF_ERROR(decode_constant(attr.message, attr.name, first_output, next));
    }
  }
  if (constant && !have_value)
    return error_at(ErrorCode::malformed, "Constant node has no value attribute", first_output, node_field.offset);
  return {};
}

Status ModelDecoder::decode_constant(const WireField& attribute, std::string_view attr_name, std::string_view name,
                                     const WireField& /*node_field*/) {
  BALLAST_ASSIGN_OR_RETURN(auto attr, scan_attribute(attribute));

  if (attr_name == "value") {
    if (!attr.t)
      return error_at(ErrorCode::malformed, "Constant 'value' attribute without a tensor", name, attribute.offset);
    return add_tensor(*attr.t, WeightSource::constant, name);
  }
  if (attr_name == "sparse_value") {
    model_.notes.push_back({std::string(name), "Constant sparse_value is not supported: not loaded as a weight"});
    return {};
  }
  if (attr_name == "value_string" || attr_name == "value_strings") {
    StringTensorInfo info;
    info.name = std::string(name);
    info.source = WeightSource::constant;
    if (attr_name == "value_strings") info.dims = {static_cast<std::int64_t>(attr.strings)};
    model_.string_tensors.push_back(std::move(info));
    return {};
  }

  WeightRef w;
  w.source = WeightSource::constant;
  w.storage = WeightRef::Storage::inline_owned;
  if (attr_name == "value_float") {
    const std::uint32_t bits = attr.f_bits.value_or(0);
    std::byte le[4];
    for (int k = 0; k < 4; ++k) le[k] = static_cast<std::byte>((bits >> (8 * k)) & 0xffu);
    w.dtype = DataType::float32;
    w.owned = owned_bytes(le, 4);
  } else if (attr_name == "value_int") {
    w.dtype = DataType::int64;
    w.owned = owned_int64_le(attr.i.value_or(0));
  } else if (attr_name == "value_floats") {
    BALLAST_ASSIGN_OR_RETURN(auto data, gather_fixed(attribute, attr_field::kFloats, 4, "AttributeProto.floats"));
    w.dtype = DataType::float32;
    w.dims = {static_cast<std::int64_t>(data.count)};
    if (data.owned) {
      w.owned = data.owned;
    } else {
      w.storage = WeightRef::Storage::inline_borrowed;  // a packed run is already float32 LE
      w.inline_bytes = data.bytes;
    }
  } else {  // value_ints
    BALLAST_ASSIGN_OR_RETURN(auto count, count_varints(attribute, attr_field::kInts, "AttributeProto.ints"));
    BALLAST_ASSIGN_OR_RETURN(auto data,
                             gather_varints(attribute, attr_field::kInts, count, 8, false, "AttributeProto.ints"));
    w.dtype = DataType::int64;
    w.dims = {static_cast<std::int64_t>(count)};
    w.owned = data.owned;
  }
  if (w.owned) w.inline_bytes = Bytes(w.owned->data(), w.owned->size());
  return add_weight(name, std::move(w), attribute.offset);
}

Status ModelDecoder::add_tensor(const WireField& tensor, WeightSource source, std::string_view name_override) {
  DecodedTensor& decoded = decoded_;
  BALLAST_RETURN_IF_ERROR(tensors_.decode(tensor, source, name_override, decoded));
  if (decoded.is_string) {
    StringTensorInfo info;
    info.name = std::string(decoded.name);
    info.dims = std::move(decoded.weight.dims);
    info.source = source;
    model_.string_tensors.push_back(std::move(info));
    return {};
  }
  return add_weight(decoded.name, std::move(decoded.weight), tensor.offset);
}

Status ModelDecoder::add_weight(std::string_view name, WeightRef&& weight, std::uint64_t offset) {
  if (name.empty()) return error_at(ErrorCode::malformed, "weight without a name", name, offset);
  // As safetensors' header refuses "\u0000": the C API and Python read a
  // name up to its first NUL, so "a\0x" and "a\0y" would both be "a"
  // there, and neither found by its name. (The error's tensor field spells
  // the NUL, so a C caller's copy of it is whole.)
  if (const auto nul = name.find('\0'); nul != std::string_view::npos) {
    std::string spelled;
    for (char c : name) spelled += c == '\0' ? std::string("\\x00") : std::string(1, c);
    return error_at(
        ErrorCode::malformed,
        "weight name holds a NUL byte; C callers would read it as '" + std::string(name.substr(0, nul)) + "'", spelled,
        offset);
  }
  const ValueId id = model_.intern(name);
  auto [it, inserted] = store::StoreAccess::weights(model_.store).try_emplace(id, std::move(weight));
  if (!inserted) return error_at(ErrorCode::malformed, "duplicate weight name '" + std::string(name) + "'", name, offset);
  model_.weight_order.push_back(id);
  return {};
}

void build_node_table(Model::Impl& model) {
  struct Slices {
    std::size_t inputs_begin = 0, inputs_count = 0;
    std::size_t outputs_begin = 0, outputs_count = 0;
    std::size_t attributes_begin = 0, attributes_count = 0;
    std::size_t lists_begin = 0, lists_count = 0;
  };
  // Built aside and swapped in at the end: if an allocation throws, the
  // Model's tables stay empty and the next call starts over.
  std::vector<NodeInfo> nodes;
  std::vector<std::string_view> values;
  std::vector<IntAttribute> attributes;
  std::vector<IntsAttribute> lists;
  std::vector<std::int64_t> ints;
  std::vector<std::pair<std::size_t, std::size_t>> list_values;  // per list: [begin, count) in ints
  std::vector<Slices> slices;
  slices.reserve(model.node_records.size());
  nodes.reserve(model.node_records.size());
  std::vector<std::string_view> inputs, outputs;
  for (const Model::Impl::NodeRecord& record : model.node_records) {
    NodeInfo node;
    node.depth = record.depth;
    inputs.clear();
    outputs.clear();
    Slices at;
    at.attributes_begin = attributes.size();
    at.lists_begin = lists.size();
    WireReader reader(record.payload, record.payload_offset);
    WireField f;
    // The loader validated every record: a failure here cannot happen, and
    // would only end this node's list early. This loop reads the same
    // fields as ModelDecoder::decode_node; a change to one is a change to
    // both. They are kept apart on purpose: one shared reader (a template
    // that collects the lists only here) made opens about 6% slower.
    while (!reader.at_end() && reader.next(f)) {
      if (f.type != WireType::len) continue;
      switch (f.number) {
        case node_field::kInput: inputs.push_back(f.text()); break;
        case node_field::kOutput: outputs.push_back(f.text()); break;
        case node_field::kName: node.name = f.text(); break;
        case node_field::kOpType: node.op_type = f.text(); break;
        case node_field::kDomain: node.domain = f.text(); break;
        case node_field::kAttribute: {
          auto attr = scan_attribute(f);
          if (attr && attr->i && (attr->type == kAttrTypeInt || attr->type == 0))
            attributes.push_back({attr->name, *attr->i});
          if (attr && attr->has_ints && (attr->type == kAttrTypeInts || attr->type == 0)) {
            const std::size_t begin = ints.size();
            const bool whole = read_ints(attr->message, ints);
            if (!whole) ints.resize(begin);  // not a shorter list: none
            lists.push_back({attr->name, {}});
            list_values.emplace_back(begin, ints.size() - begin);
          }
          break;
        }
        default: break;
      }
    }
    at.attributes_count = attributes.size() - at.attributes_begin;
    at.lists_count = lists.size() - at.lists_begin;
    at.inputs_begin = values.size();
    at.inputs_count = inputs.size();
    values.insert(values.end(), inputs.begin(), inputs.end());
    at.outputs_begin = values.size();
    at.outputs_count = outputs.size();
    values.insert(values.end(), outputs.begin(), outputs.end());
    nodes.push_back(node);
    slices.push_back(at);
  }
  // Nothing grows any more: point the nodes at their values and attributes
  // (a vector's buffer survives the swap below).
  const std::span<const std::string_view> all_values(values);
  const std::span<const IntAttribute> all_attributes(attributes);
  const std::span<const std::int64_t> all_ints(ints);
  for (std::size_t i = 0; i < lists.size(); ++i)
    lists[i].values = all_ints.subspan(list_values[i].first, list_values[i].second);
  const std::span<const IntsAttribute> all_lists(lists);
  for (std::size_t i = 0; i < slices.size(); ++i) {
    NodeInfo& node = nodes[i];
    const Slices& at = slices[i];
    node.inputs = all_values.subspan(at.inputs_begin, at.inputs_count);
    node.outputs = all_values.subspan(at.outputs_begin, at.outputs_count);
    node.int_attributes = all_attributes.subspan(at.attributes_begin, at.attributes_count);
    node.ints_attributes = all_lists.subspan(at.lists_begin, at.lists_count);
  }
  std::vector<std::string> generated;
  name_nodes(nodes, generated);
  model.nodes.swap(nodes);
  model.generated_node_names.swap(generated);
  model.node_values.swap(values);
  model.node_attributes.swap(attributes);
  model.node_ints_attributes.swap(lists);
  model.node_ints.swap(ints);
}

}  // namespace ballast::onnx
