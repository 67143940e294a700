#include <ballast/device_weights.hpp>
#include <ballast/log.hpp>

#include <mutex>
#include <unordered_map>
#include <vector>

namespace ballast {

struct DeviceWeights::Impl {
  GpuBackend* backend = nullptr;
  const WeightStore* store = nullptr;
  std::string label;

  std::mutex mutex;
  // Mapping id -> registration pointer; 0 marks a mapping that fell back to upload.
  std::unordered_map<MappingId, DevicePtr> registrations;
  std::unordered_map<ValueId, DevicePtr> resolved;
  std::vector<std::pair<DevicePtr, std::uint64_t>> uploads;  // (ptr, bytes) this object owns
  WeightResidency residency;

  Result<DevicePtr> upload(Bytes bytes) {
    BALLAST_ASSIGN_OR_RETURN(auto ptr, backend->allocate(bytes.size()));
    if (Status s = backend->copy_to_device(ptr, 0, bytes); !s.ok()) {
      static_cast<void>(backend->free(ptr));
      return s.error();
    }
    uploads.emplace_back(ptr, bytes.size());
    residency.uploaded_weights += 1;
    residency.uploaded_bytes += bytes.size();
    return ptr;
  }

  // Registers the whole mapping once; 0 means "upload this file's weights".
  DevicePtr registration_for(MappingId mapping) {
    if (auto it = registrations.find(mapping); it != registrations.end()) return it->second;
    DevicePtr base = 0;
    std::string why;
    const Capabilities& caps = backend->capabilities();
    auto whole = store->mmap_full_bytes(mapping);
    if (!caps.host_registration || !caps.read_only_registration) {
      // Mappings are read-only: a backend that cannot register read-only
      // memory is not asked to.
      why = std::string(caps.host_registration ? "backend cannot register read-only host memory"
                                               : "backend cannot register host memory") +
            (caps.host_registration_note.empty() ? std::string() : ": " + caps.host_registration_note);
    } else if (!whole || whole->empty()) {
      why = "mapping has no bytes to register";
    } else {
      auto reg = backend->register_host(whole->data(), whole->size(), HostAccess::read_only);
      if (reg.ok()) {
        base = *reg;
        residency.registered_files += 1;
        residency.registered_bytes += whole->size();
      } else {
        why = "registering " + store->mapping_path(mapping).value_or("?").string() +
              " failed: " + reg.error().to_string();
      }
    }
    if (base == 0) {
      residency.fallback_files += 1;
      log_message(LogLevel::warning, "device weights",
                  "uploading the weights of " + store->mapping_path(mapping).value_or("?").string() +
                      " instead of registering the mapping: " + why);
      if (residency.fallback_reason.empty()) residency.fallback_reason = why;
    }
    registrations.emplace(mapping, base);
    return base;
  }
};

DeviceWeights::DeviceWeights(GpuBackend& backend, const WeightStore& store, std::string label)
    : impl_(std::make_unique<Impl>()) {
  impl_->backend = &backend;
  impl_->store = &store;
  impl_->label = std::move(label);
}

// Backstop, same rule as TeardownHost(gpu): an engine that forgets
// release() must not leave registrations and uploads live on the backend.
// Like the host, this needs the backend alive, which the documented
// lifetime rule already requires (destroy DeviceWeights before its backend);
// failures have no one to report to here, so call release() to see them.
DeviceWeights::~DeviceWeights() {
  if (impl_) static_cast<void>(release(*impl_->backend));
}

std::string DeviceWeights::label() const { return impl_->label; }

WeightResidency DeviceWeights::residency() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->residency;
}

Result<DevicePtr> DeviceWeights::resolve(ValueId id) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (auto it = m.resolved.find(id); it != m.resolved.end()) return it->second;
  auto w = m.store->weights.find(id);
  if (w == m.store->weights.end())
    return make_error(ErrorCode::not_found, "no weight with value id " + std::to_string(id.index));
  const WeightRef& ref = w->second;
  auto bytes = m.store->bytes(ref);
  if (!bytes) {
    Error e = make_error(ErrorCode::out_of_bounds, "weight bytes are not mapped or out of bounds");
    if (ref.external) {
      e.file = ref.external->resolved().string();
      e.offset = ref.external->offset;
    }
    return e;
  }
  DevicePtr ptr = 0;
  if (ref.is_external()) {
    auto prov = m.store->external_mmap_provenance(ref);
    if (prov) {
      const DevicePtr base = m.registration_for(prov->mapping);
      // A weight at an offset its kernels cannot read in place (not aligned
      // to its element size) is uploaded instead, and counted.
      if (base != 0) {
        const DevicePtr in_place = base + prov->offset;
        if (m.backend->capabilities().unaligned_operands || in_place % derivation_operand_alignment(ref.dtype) == 0)
          ptr = in_place;
        else m.residency.misaligned_uploads += 1;
      }
    }
  }
  if (ptr == 0) {
    BALLAST_ASSIGN_OR_RETURN(auto up, m.upload(*bytes), "making weight visible to " + m.backend->info().backend);
    ptr = up;
  }
  m.resolved.emplace(id, ptr);
  return ptr;
}

Released DeviceWeights::release(GpuBackend& backend) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  Released out;
  auto note_failure = [&out](Status s, const std::string& what) {
    out.failed_frees += 1;
    if (out.status.ok()) out.status = std::move(s).with_context(what);
  };
  for (auto& [ptr, bytes] : m.uploads) {
    if (Status s = backend.free(ptr); s.ok()) {
      out.bytes_freed += bytes;
      out.allocations_freed += 1;
    } else {
      note_failure(std::move(s), "freeing an uploaded weight");
    }
  }
  for (auto& [mapping, base] : m.registrations) {
    if (base == 0) continue;
    if (Status s = backend.unregister_host(base); !s.ok()) note_failure(std::move(s), "unregistering a mapping");
  }
  m.uploads.clear();
  m.registrations.clear();
  m.resolved.clear();
  m.residency = {};
  return out;
}

}  // namespace ballast
