#include "gguf/loader.hpp"

#include "gguf/header.hpp"
#include "onnx/external_data.hpp"  // shown
#include "onnx/load_errors.hpp"
#include "onnx/model_impl.hpp"
#include "onnx/sibling_files.hpp"
#include "store/safe_open.hpp"
#include "store/store_access.hpp"

#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

namespace ballast::gguf {

namespace {

using onnx::absolute_of;
using onnx::in_file;

HeaderLimits limits_of(const LoadOptions& o) {
  HeaderLimits l;
  l.max_tensors = o.max_tensors_per_file;
  l.max_metadata_entries = o.max_gguf_metadata_entries;
  l.max_array_elements = o.max_gguf_array_elements;
  l.max_string_bytes = o.max_metadata_bytes;
  l.max_tensor_elements = o.max_tensor_elements;
  return l;
}

struct Part {
  MappingId id = 0;
  std::shared_ptr<const ExternalFile> file;
  Header header;
};

Result<Header> read_header(WeightStore& store, MappingId id, const std::string& display, const LoadOptions& options) {
  auto header = onnx::read_mapped_header(store, id, display, "reading GGUF header",
                                         [&](Bytes bytes) { return parse_header(bytes, limits_of(options)); });
  if (header) store::StoreAccess::set_header_bytes(store, id, header->header_bytes);
  return header;
}

// A split part's name: <prefix>-NNNNN-of-MMMMM.gguf, five digits each.
struct SplitName {
  std::string prefix;
  std::uint64_t no = 0;  // 1-based, as the name writes it
  std::uint64_t count = 0;
};

std::optional<SplitName> split_name(std::string_view file) {
  constexpr std::string_view kTail = ".gguf";
  constexpr std::size_t kShape = 1 + 5 + 4 + 5;  // -NNNNN-of-MMMMM
  if (file.size() < kShape + kTail.size() || file.substr(file.size() - kTail.size()) != kTail) return std::nullopt;
  const std::string_view s = file.substr(file.size() - kTail.size() - kShape, kShape);
  auto digits = [](std::string_view d, std::uint64_t& out) {
    out = 0;
    for (char c : d) {
      if (c < '0' || c > '9') return false;
      out = out * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return true;
  };
  SplitName n;
  if (s[0] != '-' || s.substr(6, 4) != "-of-" || !digits(s.substr(1, 5), n.no) || !digits(s.substr(10, 5), n.count))
    return std::nullopt;
  n.prefix = std::string(file.substr(0, file.size() - kTail.size() - kShape));
  return n;
}

std::string part_name(const SplitName& n, std::uint64_t no) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(no),
                static_cast<unsigned long long>(n.count));
  return n.prefix + buf;
}

void add_weights(Model::Impl& impl, const Part& part) {
  auto& weights = store::StoreAccess::weights(impl.store);
  for (const TensorInfo& t : part.header.tensors) {
    const ValueId id = impl.intern(t.name);
    WeightRef w;
    w.dtype = t.dtype;
    std::vector<std::int64_t> dims(t.ne.rbegin(), t.ne.rend());  // GGUF lists the innermost first
    w.dims = Dims(std::span<const std::int64_t>(dims));
    w.source = WeightSource::initializer;
    w.storage = WeightRef::Storage::external;
    ExternalLocation loc;
    loc.file = part.file;
    loc.offset = part.header.data_start + t.offset;
    loc.length = t.bytes;
    loc.length_was_given = true;
    w.external = std::move(loc);
    weights.emplace(id, std::move(w));
    impl.weight_order.push_back(id);
  }
  for (const MetadataEntry& m : part.header.metadata)
    impl.metadata.push_back({part.file->location, m.key, m.value, m.type, m.count});
}

Error split_error(std::string message, const std::string& file) {
  Error e = make_error(ErrorCode::malformed, std::move(message));
  e.file = file;
  return e;
}

Result<Model> load_unchecked(const std::filesystem::path& path, const LoadOptions& options) {
  const std::filesystem::path absolute = absolute_of(path);
  const std::string display = absolute.string();
  auto opened = store::open_regular(absolute);
  if (!opened) return in_file(std::move(opened.error()), display).with_context("opening GGUF file");
  Model model;
  Model::Impl& impl = detail::ModelAccess::impl(model);
  impl.format = ModelFormat::gguf;
  impl.path = absolute;
  impl.file_size = static_cast<std::uint64_t>(opened->st.st_size);
  const std::filesystem::path target = store::path_of(opened->fd.get(), absolute);
  BALLAST_ASSIGN_OR_RETURN(const MappingId id, impl.store.map_external_fd(opened->fd.get(), target),
                           "opening GGUF file");
  Part first;
  first.id = id;
  const std::string file_name = absolute.filename().string();
  first.file = onnx::external_file(file_name, target, opened->st);
  BALLAST_ASSIGN_OR_RETURN(first.header, read_header(impl.store, id, display, options), "opening GGUF file");

  if (!first.header.split || first.header.split->count <= 1) {
    impl.weight_order.reserve(first.header.tensors.size());
    add_weights(impl, first);
    return model;
  }
  // One part of several: the others are named after this one.
  const Split split = *first.header.split;
  const auto name = split_name(file_name);
  if (!name)
    return split_error("split.count is " + std::to_string(split.count) +
                           ", but the file's name does not read <prefix>-NNNNN-of-MMMMM.gguf, which names the parts",
                       display);
  if (name->count != split.count || name->no != split.no + 1)
    return split_error("the name says part " + std::to_string(name->no) + " of " + std::to_string(name->count) +
                           ", the metadata part " + std::to_string(split.no + 1) + " of " + std::to_string(split.count) +
                           " (split.no counts from 0)",
                       display);
  if (split.count > options.max_external_locations)
    return in_file(make_error(ErrorCode::overflow, "split.count " + std::to_string(split.count) +
                                                       " exceeds LoadOptions::max_external_locations (" +
                                                       std::to_string(options.max_external_locations) + ")"),
                   display);
  onnx::SiblingOpener opener(absolute, options, impl.store, "split part", file_name);
  BALLAST_RETURN_IF_ERROR(opener.open_roots(opened->fd.get(), opened->st), "opening GGUF split set");
  opener.note_open(id, file_name);
  // Every part's split.tensors.count is checked against the same number,
  // so the set opens alike from whichever part is named.
  if (!split.tensors)
    return split_error("split.count is " + std::to_string(split.count) +
                           ", but there is no split.tensors.count to check the parts' tensors against",
                       display);
  std::vector<Part> parts;
  parts.reserve(static_cast<std::size_t>(split.count));
  std::uint64_t tensors = 0;
  for (std::uint64_t no = 1; no <= split.count; ++no) {
    if (no == name->no) {
      parts.push_back(std::move(first));
    } else {
      const std::string location = part_name(*name, no);
      BALLAST_ASSIGN_OR_RETURN(onnx::Sibling file, opener.open(location), "opening GGUF split set");
      Part part;
      part.id = file.id;
      part.file = std::move(file.file);
      BALLAST_ASSIGN_OR_RETURN(part.header, read_header(impl.store, part.id, file.target.string(), options),
                               "reading split part " + onnx::shown(location));
      const std::optional<Split>& s = part.header.split;
      if (!s || s->count != split.count || s->no != no - 1)
        return split_error("split part " + onnx::shown(location) + " says " +
                               (s ? "split.no " + std::to_string(s->no) + " of split.count " + std::to_string(s->count)
                                  : std::string("nothing of a split")) +
                               "; part " + std::to_string(no) + " of " + std::to_string(split.count) +
                               " should have split.no " + std::to_string(no - 1),
                           file.target.string());
      if (s->tensors != split.tensors)
        return split_error("split part " + onnx::shown(location) + " says split.tensors.count " +
                               (s->tensors ? std::to_string(*s->tensors) : std::string("nothing")) + "; " +
                               onnx::shown(file_name) + " says " + std::to_string(*split.tensors),
                           file.target.string());
      parts.push_back(std::move(part));
    }
    tensors += parts.back().header.tensors.size();
  }
  if (tensors != *split.tensors)
    return split_error("the parts hold " + std::to_string(tensors) + " tensors; split.tensors.count says " +
                           std::to_string(*split.tensors),
                       display);
  // Names unique across the parts, not only within each.
  std::unordered_map<std::string_view, std::string_view> holder;
  holder.reserve(static_cast<std::size_t>(tensors));
  for (const Part& p : parts)
    for (const TensorInfo& t : p.header.tensors) {
      auto [it, fresh] = holder.try_emplace(t.name, p.file->location);
      if (!fresh) {
        Error e = split_error("the tensor is in split part " + onnx::shown(it->second) + " and in part " +
                                  onnx::shown(p.file->location) + "; readers disagree on which one counts",
                              display);
        e.tensor = t.name;
        return e;
      }
    }
  impl.weight_order.reserve(static_cast<std::size_t>(tensors));
  for (const Part& p : parts) add_weights(impl, p);
  return model;
}

}  // namespace

bool looks_like_gguf(Bytes first) noexcept { return first.size() >= 4 && std::memcmp(first.data(), "GGUF", 4) == 0; }

Result<Model> load(const std::filesystem::path& path, const LoadOptions& options) {
  return onnx::out_of_memory_is_an_error(path, [&] { return load_unchecked(path, options); });
}

}  // namespace ballast::gguf
