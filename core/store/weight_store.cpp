#include <ballast/weight_store.hpp>

#include "store/byte_ranges.hpp"
#include "store/mapped_file.hpp"
#include "store/store_access.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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
    // The format's own header at the start of the file (safetensors' JSON):
    // mapped, but neither a weight's bytes nor dead ones.
    std::uint64_t header_bytes = 0;
  };
  struct IdentityHash {
    std::size_t operator()(const store::FileIdentity& id) const noexcept {
      return std::hash<std::uint64_t>{}(id.inode * 0x9E3779B97F4A7C15ull ^ id.device);
    }
  };

  // Guards `mappings`, `by_path`, `by_identity` and `anchors`: readers
  // (every const method) share it, map_external and keep_alive take it
  // alone. Mappings are never removed while the store lives, so spans
  // handed out stay valid.
  mutable std::shared_mutex mutex;
  std::vector<Mapping> mappings;
  std::unordered_map<std::string, MappingId> by_path;  // display paths, for hand-built references
  std::unordered_map<store::FileIdentity, MappingId, IdentityHash> by_identity;
  std::vector<std::shared_ptr<const void>> anchors;
  // The .onnx mapping inline_borrowed weights point into (the loader's).
  std::shared_ptr<const store::MappedFile> model_file;

  const Mapping* find(MappingId id) const {
    if (id == 0 || id > mappings.size()) return nullptr;
    return &mappings[id - 1];
  }

  // Text only: the exact path as registered, or its lexically normal form.
  // Never asks the file system (a name may point elsewhere by now).
  std::optional<MappingId> lookup_text(const std::filesystem::path& path) const {
    if (auto it = by_path.find(path.string()); it != by_path.end()) return it->second;
    if (auto it = by_path.find(path.lexically_normal().string()); it != by_path.end()) return it->second;
    return std::nullopt;
  }

  // The loader's files carry the identity of what was opened; hand-built
  // ones are matched by text.
  std::optional<MappingId> lookup(const ExternalFile& file) const {
    if (file.device != 0 || file.inode != 0) {
      auto it = by_identity.find(store::FileIdentity{file.device, file.inode});
      if (it != by_identity.end()) return it->second;
      return std::nullopt;
    }
    return lookup_text(file.resolved);
  }

  std::optional<MmapProvenance> provenance(const WeightRef& weight) const {
    if (!weight.is_external() || !weight.external || !weight.external->file) return std::nullopt;
    const auto id = lookup(*weight.external->file);
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

  // Where a weight's bytes are: in which mapped file (null: plain memory,
  // e.g. decoded values or bytes a caller handed to load_onnx_from_bytes)
  // and at which offset of it.
  struct Located {
    std::shared_ptr<const store::MappedFile> file;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
  };
  Result<Located> locate(const WeightRef& weight) const {
    Located out;
    if (!weight.is_external()) {
      out.length = weight.inline_bytes.size();
      if (weight.storage == WeightRef::Storage::inline_borrowed && model_file && !weight.inline_bytes.empty()) {
        const Bytes all = model_file->bytes();
        const auto at = reinterpret_cast<std::uintptr_t>(weight.inline_bytes.data());
        const auto base = reinterpret_cast<std::uintptr_t>(all.data());
        if (at >= base && at - base <= all.size() && weight.inline_bytes.size() <= all.size() - (at - base)) {
          out.file = model_file;
          out.offset = at - base;
        }
      }
      return out;
    }
    auto unmapped = [&weight](ErrorCode code, std::string message) {
      Error e = make_error(code, std::move(message));
      if (weight.external) {
        e.file = weight.external->resolved().string();
        e.offset = weight.external->offset;
      }
      return e;
    };
    if (!weight.external || !weight.external->file) return unmapped(ErrorCode::not_found, "external weight without a file");
    const auto id = lookup(*weight.external->file);
    if (!id) return unmapped(ErrorCode::not_found, "the weight's data file is not mapped");
    const Mapping* m = find(*id);
    const ExternalLocation& ext = *weight.external;
    if (!store::range_inside(ext.offset, ext.length, m->file->size()))
      return unmapped(ErrorCode::out_of_bounds, "the weight's range lies past the end of its file");
    out.file = m->file;
    out.offset = ext.offset;
    out.length = ext.length;
    return out;
  }

  // Registers a fresh mapping (lock held by the caller).
  Result<MappingId> add(std::shared_ptr<const store::MappedFile> file, const std::filesystem::path& also_known_as) {
    if (mappings.size() >= std::numeric_limits<MappingId>::max() - 1)
      return make_error(ErrorCode::overflow, "too many mapped files");
    const std::filesystem::path canonical = file->path();
    const store::FileIdentity identity = file->identity();
    mappings.push_back({std::move(file), canonical});
    const auto id = static_cast<MappingId>(mappings.size());
    by_identity.emplace(identity, id);
    by_path.emplace(canonical.string(), id);
    if (!also_known_as.empty()) by_path.emplace(also_known_as.string(), id);
    return id;
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
  auto opened = store::open_regular(path);
  if (!opened) {
    Error e = std::move(opened.error());
    e.file = path.string();
    return e;
  }
  {
    std::shared_lock lock(impl_->mutex);
    if (auto it = impl_->by_identity.find(store::identity_of(opened->st)); it != impl_->by_identity.end())
      return it->second;
  }
  BALLAST_ASSIGN_OR_RETURN(auto mapped,
                           store::MappedFile::map(opened->fd.get(), opened->st, store::path_of(opened->fd.get(), path)),
                           "mapping external data");
  std::unique_lock lock(impl_->mutex);
  if (auto it = impl_->by_identity.find(store::identity_of(opened->st)); it != impl_->by_identity.end())
    return it->second;  // mapped meanwhile by another thread: ours is dropped
  return impl_->add(std::move(mapped), path);
}

Result<MappingId> WeightStore::map_external_fd(int fd, const std::filesystem::path& display_path) {
  if (!impl_) impl_ = std::make_unique<Impl>();
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Error e = make_error(ErrorCode::io, std::string("cannot stat: ") + std::strerror(errno));
    e.file = display_path.string();
    return e;
  }
  {
    std::shared_lock lock(impl_->mutex);
    if (auto it = impl_->by_identity.find(store::identity_of(st)); it != impl_->by_identity.end()) return it->second;
  }
  BALLAST_ASSIGN_OR_RETURN(auto mapped, store::MappedFile::map(fd, st, display_path), "mapping external data");
  std::unique_lock lock(impl_->mutex);
  if (auto it = impl_->by_identity.find(store::identity_of(st)); it != impl_->by_identity.end()) return it->second;
  return impl_->add(std::move(mapped), {});
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

Status WeightStore::add(ValueId id, WeightRef weight) {
  if (weights_.contains(id))
    return make_error(ErrorCode::invalid_argument, "value " + std::to_string(id.index) + " already has a weight");
  if (weight.is_external()) {
    if (!weight.external || !weight.external->file)
      return make_error(ErrorCode::invalid_argument, "an external weight without a file");
    const ExternalLocation& ext = *weight.external;
    const auto refuse = [&](ErrorCode code, std::string message) {
      Error e = make_error(code, std::move(message));
      e.file = ext.resolved().string();
      return e;
    };
    if (!impl_) return refuse(ErrorCode::not_found, "external data file is not mapped by this store");
    std::shared_lock lock(impl_->mutex);
    const auto mapping = impl_->lookup(*ext.file);
    if (!mapping) return refuse(ErrorCode::not_found, "external data file is not mapped by this store");
    if (!impl_->provenance(weight))
      return refuse(ErrorCode::out_of_bounds,
                    "bytes [" + std::to_string(ext.offset) + ", +" + std::to_string(ext.length) + ") lie outside its " +
                        std::to_string(impl_->find(*mapping)->file->size()) + " mapped bytes");
  }
  weights_.emplace(id, std::move(weight));
  return {};
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
  if (auto id = im.lookup_text(path)) return id;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (auto it = im.by_identity.find(store::identity_of(st)); it != im.by_identity.end()) return it->second;
  return std::nullopt;
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
  for (const auto& [id, weight] : weights_) {
    if (!weight.is_external() || !weight.external || !weight.external->file) continue;
    const ExternalFile* file = weight.external->file.get();
    auto [it, fresh] = mapping_of.try_emplace(file);
    if (fresh) it->second = im.lookup(*file);
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
    f.header_bytes = std::min(im.mappings[i].header_bytes, f.mapped_bytes);
    f.ranges = store::merge_ranges(std::move(per_mapping[i]), f.mapped_bytes);
    f.referenced_bytes = store::total_length(f.ranges);
    out.total += f.referenced_bytes;
    out.header_total += f.header_bytes;
    out.files.push_back(std::move(f));
  }
  return out;
}

std::uint64_t WeightStore::format_header_bytes() const {
  BALLAST_STORE_READ(0);
  std::uint64_t total = 0;
  for (const auto& m : im.mappings) total += std::min(m.header_bytes, m.file->size());
  return total;
}

std::uint64_t WeightStore::unreferenced_external_bytes(const ReferencedWeightBytes& referenced) const {
  const std::uint64_t mapped = mapped_external_bytes();
  const std::uint64_t accounted = referenced.total + format_header_bytes();
  return mapped > accounted ? mapped - accounted : 0;
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
    if (im.mappings[i].header_bytes != 0) used.push_back({0, std::min(im.mappings[i].header_bytes, size)});
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

Status WeightStore::check_unchanged(const WeightRef& weight) const {
  std::shared_ptr<const store::MappedFile> file;
  {
    BALLAST_STORE_READ(Status());
    auto where = im.locate(weight);
    if (!where) return where.error();
    file = std::move(where->file);
  }
  return file ? file->check_unchanged() : Status();
}

Status WeightStore::check_unchanged(MappingId mapping) const {
  auto file = store::StoreAccess::mapping(*this, mapping);
  if (!file) return make_error(ErrorCode::not_found, "no mapping with id " + std::to_string(mapping));
  return file->check_unchanged();
}

Status WeightStore::copy_bytes(const WeightRef& weight, std::uint64_t offset, std::span<std::byte> dst) const {
  Impl::Located where;
  {
    BALLAST_STORE_READ(make_error(ErrorCode::not_found, "the store is empty (moved from)"));
    auto found = im.locate(weight);
    if (!found) return found.error();
    where = std::move(*found);
  }
  if (!store::range_inside(offset, dst.size(), where.length)) {
    Error e = make_error(ErrorCode::out_of_bounds, "copying [" + std::to_string(offset) + ", +" +
                                                       std::to_string(dst.size()) + ") of a " +
                                                       std::to_string(where.length) + "-byte weight");
    if (where.file) e.file = where.file->path().string();
    return e;
  }
  if (dst.empty()) return where.file ? where.file->check_unchanged() : Status();
  // Reads of a mapped file go through its descriptor, never the mapping.
  if (where.file) return where.file->read(where.offset + offset, dst);
  std::memcpy(dst.data(), weight.inline_bytes.data() + offset, dst.size());
  return {};
}

Status WeightStore::transfer(const WeightRef& weight, std::uint64_t offset, std::uint64_t length,
                             const std::function<Status(Bytes)>& sink) const {
  Impl::Located where;
  {
    BALLAST_STORE_READ(make_error(ErrorCode::not_found, "the store is empty (moved from)"));
    auto found = im.locate(weight);
    if (!found) return found.error();
    where = std::move(*found);
  }
  if (!store::range_inside(offset, length, where.length)) {
    Error e = make_error(ErrorCode::out_of_bounds, "transferring [" + std::to_string(offset) + ", +" +
                                                       std::to_string(length) + ") of a " +
                                                       std::to_string(where.length) + "-byte weight");
    if (where.file) e.file = where.file->path().string();
    return e;
  }
  // In a mapped file: the mapping itself, armed against truncation.
  if (where.file) return where.file->transfer(where.offset + offset, length, sink);
  return sink(weight.inline_bytes.subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(length)));
}

Status WeightStore::check_path(MappingId mapping) const {
  auto file = store::StoreAccess::mapping(*this, mapping);
  if (!file) return make_error(ErrorCode::not_found, "no mapping with id " + std::to_string(mapping));
  const std::filesystem::path& path = file->path();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    Error e = make_error(err == ENOENT || err == ENOTDIR ? ErrorCode::not_found : ErrorCode::io,
                         err == ENOENT || err == ENOTDIR
                             ? path.string() + " no longer exists (the mapping still serves the file that was opened)"
                             : path.string() + " cannot be checked: " + std::strerror(err));
    e.file = path.string();
    return e;
  }
  const store::FileIdentity now = store::identity_of(st), then = file->identity();
  if (now != then) {
    Error e = make_error(ErrorCode::io, path.string() + " now names a different file (inode " +
                                            std::to_string(then.inode) + ", now " + std::to_string(now.inode) +
                                            (now.device != then.device ? ", on another device" : "") +
                                            "); the mapping still serves the file that was opened");
    e.file = path.string();
    return e;
  }
  return {};
}

namespace store {

void StoreAccess::set_model_file(WeightStore& store, std::shared_ptr<const MappedFile> file) {
  if (!store.impl_) store.impl_ = std::make_unique<WeightStore::Impl>();
  std::unique_lock lock(store.impl_->mutex);
  store.impl_->model_file = std::move(file);
}

void StoreAccess::set_header_bytes(WeightStore& store, MappingId id, std::uint64_t bytes) {
  if (!store.impl_) return;
  std::unique_lock lock(store.impl_->mutex);
  if (id != 0 && id <= store.impl_->mappings.size()) store.impl_->mappings[id - 1].header_bytes = bytes;
}

Status StoreAccess::share_files(WeightStore& into, const WeightStore& from) {
  if (!into.impl_) into.impl_ = std::make_unique<WeightStore::Impl>();
  if (&into == &from || !from.impl_) return {};
  std::shared_lock read(from.impl_->mutex);
  std::unique_lock write(into.impl_->mutex);
  WeightStore::Impl& in = *into.impl_;
  if (!in.mappings.empty())
    return make_error(ErrorCode::invalid_argument, "a store that maps files of its own cannot share another's");
  in.mappings = from.impl_->mappings;
  in.by_path = from.impl_->by_path;
  in.by_identity = from.impl_->by_identity;
  in.model_file = from.impl_->model_file;
  in.anchors.insert(in.anchors.end(), from.impl_->anchors.begin(), from.impl_->anchors.end());
  return {};
}

std::shared_ptr<const MappedFile> StoreAccess::model_file(const WeightStore& store) {
  if (!store.impl_) return nullptr;
  std::shared_lock lock(store.impl_->mutex);
  return store.impl_->model_file;
}

std::shared_ptr<const MappedFile> StoreAccess::mapping(const WeightStore& store, MappingId id) {
  if (!store.impl_) return nullptr;
  std::shared_lock lock(store.impl_->mutex);
  const WeightStore::Impl::Mapping* m = store.impl_->find(id);
  return m ? m->file : nullptr;
}

}  // namespace store

}  // namespace ballast
