// Model: a model's weights, read from any format ballast knows (ONNX,
// safetensors, a sharded safetensors checkpoint, GGUF), and open_model, which
// tells the format from the file's bytes. The ONNX-only entry points are in
// onnx_loader.hpp; docs/sources.md describes each format.
#pragma once

#include <ballast/export.hpp>
#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

BALLAST_API_BEGIN

namespace ballast {

namespace detail {
struct BALLAST_HIDDEN ModelAccess;
}

enum class ModelFormat : std::uint8_t {
  onnx,               // an ONNX protobuf (.onnx), weights inline or in external data files
  safetensors,        // one .safetensors file
  safetensors_index,  // a sharded checkpoint: a *.safetensors.index.json and its shards
  gguf,               // a .gguf file, or every file of a split set (<prefix>-0000N-of-0000M.gguf)
};
// "onnx", "safetensors", "safetensors-index", "gguf".
std::string_view model_format_name(ModelFormat format) noexcept;

// One key/value pair of a format's metadata, and the file that holds it.
struct ModelMetadata {
  std::string file;  // the file's name as the model names it
  std::string key;
  // The value as text: integers in decimal, floats in the shortest form
  // that reads back to the same value, "true"/"false", strings as they
  // are. Empty for an array, which is listed by type and count.
  std::string value;
  // GGUF only ("" for safetensors, whose values are all strings): the
  // value's type, "uint32", "float32", "string", ..., or "array[T]" with T
  // the element type ("array[array]" for nested arrays), and an array's
  // element count.
  std::string type;
  std::uint64_t count = 0;
};

// Loader failures are ballast::Error values whose `file`, `tensor` and
// `offset` fields say where; the code says which kind (not_found,
// path_escapes, out_of_bounds, size_mismatch, overflow, malformed,
// unsupported, io, out_of_memory). No allocation failure escapes as an
// exception: it is an out_of_memory error.
using LoaderError = Error;

// What the loader admits and how much work a model may ask of it. Every
// limit is a defence against a hostile file; docs/security.md explains each.
struct LoadOptions {
  // External data must lie beneath the model's directory (symlinks inside
  // it are followed as long as they stay beneath it). With this set, it may
  // also lie beneath the directory that holds the model file's real path
  // (symlinks resolved): the Hugging Face cache layout, where
  // snapshots/<rev>/ holds symlinks into ../../blobs/. Nothing else is ever
  // admitted.
  bool allow_model_real_dir = false;
  // A data file with more than one hard link is refused: a hard link made
  // elsewhere can put any file the attacker could read into the directory.
  bool allow_hard_links = false;
  // Refuse tensors with more elements than this, and a tensor with a 0 dim
  // whose other dims are larger than this (absurd dims are an attack: a
  // [2^62, 0] tensor holds nothing, yet sizes computed from it overflow).
  std::uint64_t max_tensor_elements = std::uint64_t{1} << 40;
  // external_data entries on one tensor (real ones have 2 to 5).
  std::uint32_t max_external_entries = 64;
  // Bytes of one external_data location (PATH_MAX).
  std::uint32_t max_location_bytes = 4096;
  // Distinct location strings in one model (each is resolved and may be
  // mapped once; the kernel allows about 65,000 mappings per process).
  std::uint32_t max_external_locations = 16384;

  // ---- safetensors (docs/sources.md)
  // Bytes of one file's JSON header (the specification's cap is 100 MB).
  std::uint64_t max_header_bytes = 100'000'000;
  // Tensors in one safetensors file or one index (real checkpoints have a
  // few thousand per shard; the cap bounds the memory a header can ask for).
  std::uint32_t max_tensors_per_file = 131072;
  // Bytes of any one JSON string of a header or an index (a name, a
  // metadata value), and of one file's __metadata__ in all. The JSON parser
  // holds a string whole before ballast sees it, so this is what bounds a
  // header's memory (real metadata is kilobytes: a config, a format tag).
  std::uint64_t max_metadata_bytes = std::uint64_t{16} << 20;
  // The specification forbids bytes no tensor covers in the byte buffer
  // (they would let a file be two formats at once); such a file is refused.
  // With this set it is opened and the holes are reported as dead bytes.
  bool allow_holes = false;

  // ---- GGUF (docs/sources.md). Strings (keys, values, array elements)
  // are capped by max_metadata_bytes, tensors per file by
  // max_tensors_per_file, split files by max_external_locations.
  // Metadata key/value pairs in one file (a real model has a few dozen).
  std::uint64_t max_gguf_metadata_entries = 65536;
  // Elements of one metadata array (a tokenizer's vocabulary is the
  // largest real one: about 260,000 strings).
  std::uint64_t max_gguf_array_elements = std::uint64_t{1} << 24;
};

// An integer attribute of a node, and a list of integers (INTS: a
// Transpose's perm); other attributes are not kept.
struct IntAttribute {
  std::string_view name;
  std::int64_t value = 0;
};
struct IntsAttribute {
  std::string_view name;
  // Empty for a list whose packed bytes are not whole varints: such a
  // value is read as no list at all rather than a shorter one.
  std::span<const std::int64_t> values;
};

// A node of the graph (any nesting depth), kept so that tools can tell what
// consumes each weight. The views point into the model's own bytes and
// tables: they live exactly as long as the Model (moving it keeps them).
struct NodeInfo {
  // The node's name; for a node the file leaves unnamed (NodeProto.name is
  // optional), "<op_type>#<i>" with i its index in Model::nodes(), made
  // unique against the names the file gives (docs/derivations.md, "Node
  // names"). Never empty in a loaded model.
  std::string_view name;
  std::string_view op_type;
  std::string_view domain;  // "" for the default ONNX domain
  std::span<const std::string_view> inputs;   // "" marks an omitted optional input
  std::span<const std::string_view> outputs;
  std::span<const IntAttribute> int_attributes;  // in file order
  unsigned depth = 0;  // 0 = main graph
  std::span<const IntsAttribute> ints_attributes;  // in file order

  // The last value given for integer attribute `attribute` (protobuf: later wins).
  std::optional<std::int64_t> int_attribute(std::string_view attribute) const noexcept {
    std::optional<std::int64_t> found;
    for (const IntAttribute& a : int_attributes)
      if (a.name == attribute) found = a.value;
    return found;
  }
  // The last list given for `attribute`.
  std::optional<std::span<const std::int64_t>> ints_attribute(std::string_view attribute) const noexcept {
    std::optional<std::span<const std::int64_t>> found;
    for (const IntsAttribute& a : ints_attributes)
      if (a.name == attribute) found = a.values;
    return found;
  }
};

// A string tensor: listed, but not a weight.
struct StringTensorInfo {
  std::string name;
  Dims dims;
  WeightSource source = WeightSource::initializer;
};

// A model-local function (ModelProto.functions, e.g. torch's
// export_modules_as_functions). Its nodes are not read: they are not in
// Model::nodes(), and the planner does not see the weights its calls pass
// to them (plan_derivations lists one PlanSkip per function).
struct ModelFunction {
  std::string domain;
  std::string name;
  std::uint64_t nodes = 0;  // the nodes of its body (their subgraphs not counted)
};

// Something the loader did not treat as fatal but a person should see.
struct LoadNote {
  std::string tensor;
  std::string message;
};

class Model {
 public:
  Model();
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  // The file the model was opened from (the .onnx, the .safetensors, a
  // sharded checkpoint's index, or the .gguf: of a split set, the part
  // given), and its size in bytes.
  const std::filesystem::path& path() const noexcept;
  std::uint64_t file_size() const noexcept;

  WeightStore& store() noexcept;
  const WeightStore& store() const noexcept;

  // Every value the graph names (weights, node inputs and outputs) has an
  // id. Weights get theirs while the model is opened; the first call to any
  // of these three numbers the rest (once, thread-safe), so opening stays
  // proportional to the weights, not to the activations.
  // The const calls may run concurrently; intern() (which adds a name the
  // graph does not have) may not run alongside any of them.
  std::optional<ValueId> value_id(std::string_view name) const;
  std::string_view value_name(ValueId id) const;
  ValueId intern(std::string_view name);
  // The weight of that name; nullptr when the model has none.
  const WeightRef* weight(std::string_view name) const;

  // Weights in file order (the store's map is unordered).
  const std::vector<ValueId>& weight_order() const noexcept;
  // Every node at every depth, parents first. Built on the first call
  // (once, thread-safe; opening only validates the nodes).
  const std::vector<NodeInfo>& nodes() const;
  // The node that computes `value` (the first in nodes() order with it
  // among its outputs), or nullptr: a weight, a graph input, no such value.
  // Indexed on the first call (once, thread-safe), then one lookup each.
  const NodeInfo* producer(std::string_view value) const;
  // ok while the .onnx file is as it was opened (size, modification and
  // status change times) and no read of its mapping faulted. Node records
  // are read from the mapping lazily (nodes(), planning), under a guard
  // that makes pages a truncation took read as zeros instead of killing
  // the process; this is how a caller learns that happened: an io error
  // naming the file. plan_derivations() checks it before it returns.
  Status check_unchanged() const;
  const std::vector<StringTensorInfo>& string_tensors() const noexcept;
  const std::vector<LoadNote>& notes() const noexcept;
  // ONNX: the model-local functions, in file order (none for other formats).
  const std::vector<ModelFunction>& functions() const noexcept;

  std::int64_t ir_version() const noexcept;
  // (domain, version) pairs from opset_import.
  const std::vector<std::pair<std::string, std::int64_t>>& opsets() const noexcept;

  // Which format the model was read from, and the key/value metadata the
  // format carries (safetensors' __metadata__ of every file, in file order;
  // GGUF's key/value pairs with their types, of every part of a split set;
  // none for ONNX, whose metadata_props ballast does not keep).
  ModelFormat format() const noexcept;
  const std::vector<ModelMetadata>& metadata() const noexcept;

  struct BALLAST_HIDDEN Impl;

 private:
  // The loaders' way in (core/onnx/model_access.hpp); engines have none.
  friend struct detail::ModelAccess;
  std::unique_ptr<Impl> impl_;
};

// Opens the model at `path` in whichever format its bytes say (never its
// name): an ONNX protobuf, a safetensors file, a sharded safetensors
// index (a JSON object with a "weight_map"), or a GGUF file (with the rest
// of its split set, when its metadata says it is one of several). Every format gives the same
// Model: weights by name, zero-copy from one mapping per file, the store's
// accounting of referenced and dead bytes. Errors name the file, the
// tensor and the field.
Result<Model> open_model(const std::filesystem::path& path, const LoadOptions& options = {});

// The format of the file at `path`, from its first bytes; unsupported
// (naming what the bytes look like) when it is none ballast reads.
Result<ModelFormat> detect_model_format(const std::filesystem::path& path);

}  // namespace ballast

BALLAST_API_END
