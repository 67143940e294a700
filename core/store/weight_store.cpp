#include <ballast/weight_store.hpp>

#include "store/byte_ranges.hpp"
#include "store/mapped_file.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <system_error>

namespace ballast {

std::string_view weight_source_name(WeightSource s) noexcept {
  switch (s) {
    case WeightSource::initializer: return "initializer";
    case WeightSource::constant: return "constant";
    case WeightSource::subgraph: return "subgraph";
  }
  return "unknown";
}

// Mapping ids start at 1 so that a default-constructed MmapProvenance never
// names a live mapping by accident.
struct WeightStore::Impl {
  struct Mapping {
    std::shared_ptr<const store::MappedFile> file;
    std::filesystem::path canonical;
  };

  // Guards `mappings`, `by_path` and `anchors`: readers (every const method)
  // share it, map_external and keep_alive take it alone. Mappings are never
  // removed while the store lives, so spans handed out stay valid.
  mutable std::shared_mutex mutex;
  std::vector<Mapping> mappings;
  std::unordered_map<std::string, MappingId> by_path;
  std::vector<std::shared_ptr<const void>> anchors;

  const Mapping* find(MappingId id) const {
    if (id == 0 || id > mappings.size()) return nullptr;
    return &mappings[id - 1];
  }

  // Exact match on the path as registered; hand-built references that spell
  // the path differently are canonicalised once more (no state changes).
  std::optional<MappingId> lookup(const std::filesystem::path& path) const {
    if (auto it = by_path.find(path.string()); it != by_path.end()) return it->second;
    std::error_code ec;
    auto canonical = std::filesystem::weakly_canonical(path, ec);
    if (ec) return std::nullopt;
    if (auto it = by_path.find(canonical.string()); it != by_path.end()) return it->second;
    return std::nullopt;
  }

  std::optional<MmapProvenance> provenance(const WeightRef& weight) const {
    if (!weight.is_external() || !weight.external || !weight.external->file) return std::nullopt;
    const auto id = lookup(weight.external->resolved());
    if (!id) return std::nullopt;
    const Mapping* m = find(*id);
    const ExternalLocation& ext = *weight.external;
    if (!store::range_inside(ext.offset, ext.length, m->file->size())) return std::nullopt;
    return MmapProvenance{*id, ext.offset, ext.length};
  }

  std::optional<Bytes> region(MappingId id, std::uint64_t offset, std::uint64_t length) const {
    const Mapping* m = find(id);
    if (!m || !store::range_inside(offset, length, m->file->size())) return std::nullopt;
    return m->file->bytes().subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(length));
  }
};

// A moved-from store answers like an empty one; every reader takes the
// shared lock for the duration of the call.
#define BALLAST_STORE_READ(empty_answer)     \
  if (!impl_) return empty_answer;          \
  const Impl& im = *impl_;                  \
  std::shared_lock lock(im.mutex)

WeightStore::WeightStore() : impl_(std::make_unique<Impl>()) {}
WeightStore::~WeightStore() = default;
WeightStore::WeightStore(WeightStore&&) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&&) noexcept = default;

Result<MappingId> WeightStore::map_external(const std::filesystem::path& path) {
  if (!impl_) impl_ = std::make_unique<Impl>();
  if (Status s = store::require_regular_file(path); !s.ok()) return s;
  std::error_code ec;
  const std::filesystem::path canonical = std::filesystem::canonical(path, ec);
  if (ec) {
    Error e = make_error(ErrorCode::io, "cannot resolve path: " + ec.message());
    e.file = path.string();
    return e;
  }
  std::unique_lock lock(impl_->mutex);
  if (auto it = impl_->by_path.find(canonical.string()); it != impl_->by_path.end()) return it->second;
  if (impl_->mappings.size() >= std::numeric_limits<MappingId>::max() - 1)
    return make_error(ErrorCode::overflow, "too many mapped files");
  auto mapped = store::MappedFile::open(canonical);
  if (!mapped) return std::move(mapped.error()).with_context("mapping external data");
  impl_->mappings.push_back({std::move(*mapped), canonical});
  const auto id = static_cast<MappingId>(impl_->mappings.size());
  impl_->by_path.emplace(canonical.string(), id);
  return id;
}

std::optional<Bytes> WeightStore::bytes(const WeightRef& weight) const {
  if (!weight.is_external()) return weight.inline_bytes;
  BALLAST_STORE_READ(std::nullopt);
  const auto p = im.provenance(weight);
  if (!p) return std::nullopt;
  return im.region(p->mapping, p->offset, p->length);
}

std::optional<MmapProvenance> WeightStore::external_mmap_provenance(const WeightRef& weight) const {
  BALLAST_STORE_READ(std::nullopt);
  return im.provenance(weight);
}

std::optional<Bytes> WeightStore::mmap_region_bytes(MappingId mapping, std::uint64_t offset,
                                                    std::uint64_t length) const {
  BALLAST_STORE_READ(std::nullopt);
  return im.region(mapping, offset, length);
}

std::optional<Bytes> WeightStore::mmap_full_bytes(MappingId mapping) const {
  BALLAST_STORE_READ(std::nullopt);
  const Impl::Mapping* m = im.find(mapping);
  if (!m) return std::nullopt;
  return m->file->bytes();
}

std::optional<MappingId> WeightStore::mapping_for(const std::filesystem::path& path) const {
  BALLAST_STORE_READ(std::nullopt);
  return im.lookup(path);
}

std::optional<std::filesystem::path> WeightStore::mapping_path(MappingId mapping) const {
  BALLAST_STORE_READ(std::nullopt);
  const Impl::Mapping* m = im.find(mapping);
  if (!m) return std::nullopt;
  return m->canonical;
}

std::size_t WeightStore::mapping_count() const noexcept {
  BALLAST_STORE_READ(0);
  return im.mappings.size();
}

std::uint64_t WeightStore::mapped_external_bytes() const {
  BALLAST_STORE_READ(0);
  std::uint64_t total = 0;
  for (const auto& m : im.mappings) total += m.file->size();
  return total;
}

ReferencedWeightBytes WeightStore::referenced_weight_bytes() const {
  BALLAST_STORE_READ({});
  std::vector<std::vector<ByteRange>> per_mapping(im.mappings.size());
  // Weights share a handful of ExternalFiles: look each one's mapping up once.
  std::unordered_map<const ExternalFile*, std::optional<MappingId>> mapping_of;
  for (const auto& [id, weight] : weights) {
    if (!weight.is_external() || !weight.external || !weight.external->file) continue;
    const ExternalFile* file = weight.external->file.get();
    auto [it, fresh] = mapping_of.try_emplace(file);
    if (fresh) it->second = im.lookup(file->resolved);
    const auto mapping = it->second;
    if (!mapping) continue;
    per_mapping[*mapping - 1].push_back({weight.external->offset, weight.external->length});
  }
  ReferencedWeightBytes out;
  out.files.reserve(im.mappings.size());
  for (std::size_t i = 0; i < im.mappings.size(); ++i) {
    ReferencedWeightBytes::File f;
    f.mapping = static_cast<MappingId>(i + 1);
    f.path = im.mappings[i].canonical;
    f.mapped_bytes = im.mappings[i].file->size();
    f.ranges = store::merge_ranges(std::move(per_mapping[i]), f.mapped_bytes);
    f.referenced_bytes = store::total_length(f.ranges);
    out.total += f.referenced_bytes;
    out.files.push_back(std::move(f));
  }
  return out;
}

std::uint64_t WeightStore::unreferenced_external_bytes(const ReferencedWeightBytes& referenced) const {
  const std::uint64_t mapped = mapped_external_bytes();
  return mapped > referenced.total ? mapped - referenced.total : 0;
}

std::vector<DeadRanges> WeightStore::dead_ranges(const ReferencedWeightBytes& referenced) const {
  BALLAST_STORE_READ({});
  std::vector<DeadRanges> out;
  out.reserve(im.mappings.size());
  for (std::size_t i = 0; i < im.mappings.size(); ++i) {
    const auto id = static_cast<MappingId>(i + 1);
    const std::uint64_t size = im.mappings[i].file->size();
    // Re-merge: `referenced` may come from elsewhere and is trusted for nothing.
    std::vector<ByteRange> used;
    for (const auto& f : referenced.files)
      if (f.mapping == id) used.insert(used.end(), f.ranges.begin(), f.ranges.end());
    DeadRanges d;
    d.mapping = id;
    d.path = im.mappings[i].canonical;
    d.ranges = store::complement_ranges(store::merge_ranges(std::move(used), size), size);
    d.total = store::total_length(d.ranges);
    out.push_back(std::move(d));
  }
  return out;
}

void WeightStore::keep_alive(std::shared_ptr<const void> anchor) {
  if (!impl_) impl_ = std::make_unique<Impl>();
  std::unique_lock lock(impl_->mutex);
  impl_->anchors.push_back(std::move(anchor));
}

}  // namespace ballast
