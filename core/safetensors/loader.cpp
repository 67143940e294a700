#include "safetensors/loader.hpp"

#include "onnx/external_data.hpp"  // check_location_text, shown
#include "onnx/load_errors.hpp"
#include "onnx/model_impl.hpp"
#include "onnx/sibling_files.hpp"
#include "safetensors/header.hpp"
#include "safetensors/index.hpp"
#include "store/mapped_file.hpp"
#include "store/safe_open.hpp"
#include "store/store_access.hpp"

#include <optional>
#include <unordered_map>

namespace ballast::safetensors {

namespace {

using onnx::absolute_of;
using onnx::external_file;
using onnx::in_file;

HeaderLimits limits_of(const LoadOptions& o) {
  HeaderLimits l;
  l.max_header_bytes = o.max_header_bytes;
  l.max_tensors = o.max_tensors_per_file;
  l.max_tensor_elements = o.max_tensor_elements;
  l.max_metadata_bytes = o.max_metadata_bytes;
  l.allow_holes = o.allow_holes;
  return l;
}

// One mapped safetensors file and what its header says.
struct MappedShard {
  MappingId id = 0;
  std::shared_ptr<const ExternalFile> file;
  Header header;
};

// Parses the header of mapping `id`. The mapping is armed while it is read
// (a page a truncation took reads as zeros instead of killing the process)
// and checked afterwards: a file that changed meanwhile is the error, not
// whatever its zeros parsed as.
Result<Header> read_header(WeightStore& store, MappingId id, const std::string& display, const LoadOptions& options) {
  auto header = onnx::read_mapped_header(store, id, display, "reading safetensors header",
                                         [&](Bytes bytes) { return parse_header(bytes, limits_of(options)); });
  if (header) store::StoreAccess::set_header_bytes(store, id, header->buffer_start);
  return header;
}

// Registers a mapped shard's tensors as the model's weights, in buffer
// order. `wanted` (the index's tensors of this shard) limits which; null
// takes every tensor.
void add_weights(Model::Impl& impl, const MappedShard& shard,
                 const std::unordered_map<std::string_view, std::size_t>* wanted) {
  auto& weights = store::StoreAccess::weights(impl.store);
  for (const TensorEntry& t : shard.header.tensors) {
    if (wanted != nullptr && wanted->find(t.name) == wanted->end()) continue;
    const ValueId id = impl.intern(t.name);
    WeightRef w;
    w.dtype = t.dtype->type;
    w.dims = Dims(std::span<const std::int64_t>(t.shape));
    w.source = WeightSource::initializer;
    w.storage = WeightRef::Storage::external;
    ExternalLocation loc;
    loc.file = shard.file;
    loc.offset = shard.header.buffer_start + t.begin;
    loc.length = t.end - t.begin;
    loc.length_was_given = true;
    w.external = std::move(loc);
    weights.emplace(id, std::move(w));
    impl.weight_order.push_back(id);
  }
  for (const auto& [key, value] : shard.header.metadata) impl.metadata.push_back({shard.file->location, key, value});
}

Result<Model> load_file_unchecked(const std::filesystem::path& path, const LoadOptions& options) {
  const std::filesystem::path absolute = absolute_of(path);
  const std::string display = absolute.string();
  auto opened = store::open_regular(absolute);
  if (!opened) return in_file(std::move(opened.error()), display).with_context("opening safetensors file");
  Model model;
  Model::Impl& impl = detail::ModelAccess::impl(model);
  impl.format = ModelFormat::safetensors;
  impl.path = absolute;
  impl.file_size = static_cast<std::uint64_t>(opened->st.st_size);
  const std::filesystem::path target = store::path_of(opened->fd.get(), absolute);
  BALLAST_ASSIGN_OR_RETURN(const MappingId id, impl.store.map_external_fd(opened->fd.get(), target),
                           "opening safetensors file");
  MappedShard shard;
  shard.id = id;
  shard.file = external_file(absolute.filename().string(), target, opened->st);
  BALLAST_ASSIGN_OR_RETURN(shard.header, read_header(impl.store, id, display, options), "opening safetensors file");
  impl.weight_order.reserve(shard.header.tensors.size());
  add_weights(impl, shard, nullptr);
  return model;
}

// The index names shards as relative paths, opened beneath the index's
// directory with the rules of ONNX external data (onnx/sibling_files.hpp).
class ShardOpener {
 public:
  ShardOpener(const std::filesystem::path& index_path, const LoadOptions& options, WeightStore& store)
      : options_(options), store_(store), files_(index_path, options, store, "shard", "the index") {}

  Status open_roots(int index_fd, const struct stat& index_st) { return files_.open_roots(index_fd, index_st); }

  Result<MappedShard> open(const std::string& location) {
    BALLAST_ASSIGN_OR_RETURN(onnx::Sibling file, files_.open(location));
    MappedShard shard;
    shard.id = file.id;
    shard.file = std::move(file.file);
    BALLAST_ASSIGN_OR_RETURN(shard.header, read_header(store_, shard.id, file.target.string(), options_),
                             "reading shard " + onnx::shown(location));
    return shard;
  }

 private:
  const LoadOptions& options_;
  WeightStore& store_;
  onnx::SiblingOpener files_;
};

Result<Model> load_index_unchecked(const std::filesystem::path& path, const LoadOptions& options) {
  const std::filesystem::path absolute = absolute_of(path);
  const std::string display = absolute.string();
  auto opened = store::open_regular(absolute);
  if (!opened) return in_file(std::move(opened.error()), display).with_context("opening safetensors index");
  BALLAST_ASSIGN_OR_RETURN(const std::string text,
                           read_index_text(opened->fd.get(), static_cast<std::uint64_t>(opened->st.st_size),
                                           options.max_header_bytes, display),
                           "opening safetensors index");
  auto parsed = parse_index(text, options.max_tensors_per_file, options.max_metadata_bytes);
  if (!parsed) return in_file(std::move(parsed.error()), display).with_context("reading safetensors index");
  const IndexFile& index = *parsed;

  Model model;
  Model::Impl& impl = detail::ModelAccess::impl(model);
  impl.format = ModelFormat::safetensors_index;
  impl.path = absolute;
  impl.file_size = text.size();
  const std::string index_name = absolute.filename().string();
  for (const auto& [key, value] : index.metadata) impl.metadata.push_back({index_name, key, value});

  // Shards in the order the index first names them; each tensor's entry.
  std::vector<std::string_view> shard_order;
  std::unordered_map<std::string_view, std::unordered_map<std::string_view, std::size_t>> wanted;
  for (std::size_t i = 0; i < index.weight_map.size(); ++i) {
    const auto& [tensor, shard] = index.weight_map[i];
    auto [it, fresh] = wanted.try_emplace(shard);
    if (fresh) {
      if (shard_order.size() >= options.max_external_locations)
        return in_file(make_error(ErrorCode::overflow, "index names more than " +
                                                           std::to_string(options.max_external_locations) +
                                                           " shards (LoadOptions::max_external_locations)"),
                       display);
      shard_order.push_back(shard);
    }
    it->second.emplace(tensor, i);
  }

  ShardOpener opener(absolute, options, impl.store);
  if (!shard_order.empty())
    if (Status s = opener.open_roots(opened->fd.get(), opened->st); !s.ok())
      return std::move(s.error()).with_context("opening safetensors index");
  // Which shard holds each tensor name, over every shard's header.
  std::unordered_map<std::string, std::string_view> holder;
  std::vector<MappedShard> shards;
  shards.reserve(shard_order.size());
  for (std::string_view location : shard_order) {
    BALLAST_ASSIGN_OR_RETURN(MappedShard shard, opener.open(std::string(location)), "opening safetensors index");
    for (const TensorEntry& t : shard.header.tensors) {
      auto [it, fresh] = holder.try_emplace(t.name, location);
      if (!fresh) {
        Error e = make_error(ErrorCode::malformed, "tensor is in shard " + onnx::shown(it->second) + " and in shard " +
                                                       onnx::shown(location) + "; readers disagree on which one counts");
        e.tensor = t.name.substr(0, 256);
        e.file = display;
        return e;
      }
    }
    shards.push_back(std::move(shard));
  }
  for (const auto& [tensor, shard] : index.weight_map) {
    auto it = holder.find(tensor);
    if (it == holder.end() || it->second != shard) {
      Error e = make_error(ErrorCode::not_found,
                           "the index puts the tensor in shard " + onnx::shown(shard) +
                               (it == holder.end() ? std::string(", and no shard holds it")
                                                   : ", but it is in shard " + onnx::shown(it->second)));
      e.tensor = tensor.substr(0, 256);
      e.file = display;
      return e;
    }
  }
  impl.weight_order.reserve(index.weight_map.size());
  for (std::size_t i = 0; i < shards.size(); ++i) add_weights(impl, shards[i], &wanted[shard_order[i]]);
  return model;
}


}  // namespace

Result<Model> load_file(const std::filesystem::path& path, const LoadOptions& options) {
  return onnx::out_of_memory_is_an_error(path, [&] { return load_file_unchecked(path, options); });
}

Result<Model> load_index(const std::filesystem::path& path, const LoadOptions& options) {
  return onnx::out_of_memory_is_an_error(path, [&] { return load_index_unchecked(path, options); });
}

}  // namespace ballast::safetensors
