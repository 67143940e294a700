#include <ballast/derived_weights.hpp>

#include "memo/memo_map.hpp"
#include "base/hex.hpp"

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

namespace ballast {

// One map per derivation kind, of the value type its row in the kind table
// says (one pointer or a pair): the value types differ, and a map shared by
// all kinds is exactly where a single pointer would be read as a pair.
struct DerivedWeights::Impl {
  memo::HitCounters counters;
  // bind_sources(): the epoch the keys' pointers belong to (0: none yet).
  std::atomic<std::uint64_t> sources_epoch{0};
  // bind_sources(epoch, backend): the backend the values are built on
  // (null: not told), under bind_mutex.
  const GpuBackend* backend = nullptr;
  std::mutex bind_mutex;
  std::unique_ptr<memo::MemoMap<DerivedPtr>> singles[kDerivationCount];
  std::unique_ptr<memo::MemoMap<DerivedPair>> pairs[kDerivationCount];

  Impl() {
    for (const kinds::Kind& k : kinds::kTable) {
      const auto i = static_cast<int>(k.kind);
      if (k.pair) pairs[i] = std::make_unique<memo::MemoMap<DerivedPair>>(k.kind, counters);
      else singles[i] = std::make_unique<memo::MemoMap<DerivedPtr>>(k.kind, counters);
    }
  }

  // Callers have checked the kind: these never see the other form.
  memo::MemoMap<DerivedPtr>& single(Derivation kind) noexcept { return *singles[static_cast<int>(kind)]; }
  memo::MemoMap<DerivedPair>& pair(Derivation kind) noexcept { return *pairs[static_cast<int>(kind)]; }

  // Calls f on every map of either value type, singles first.
  template <class F>
  void each(F&& f) const {
    for (const auto& m : singles)
      if (m) f(*m);
    for (const auto& m : pairs)
      if (m) f(*m);
  }
};

std::string DerivationKey::to_string() const {
  std::string out = "source " + hex(source) + " [" + std::to_string(rows) + " x " + std::to_string(cols) + "] " +
                    std::string(dtype_name(src_type));
  if (block_size != 0) out += " block " + std::to_string(block_size);
  if (scales != 0) out += " scales " + hex(scales);
  if (zero_point != 0) out += " zero points " + hex(zero_point);
  if (src_cols != 0) out += " columns " + std::to_string(col_offset) + "+ of " + std::to_string(src_cols);
  return out;
}

DerivedWeights::DerivedWeights(std::string label) : label_(std::move(label)), impl_(std::make_unique<Impl>()) {}
DerivedWeights::~DerivedWeights() = default;

Status DerivedWeights::check_kind(Derivation kind, bool want_pair) {
  const auto raw = static_cast<int>(kind);
  if (raw < 0 || raw >= kDerivationCount)
    return make_error(ErrorCode::invalid_argument, "unknown derivation " + std::to_string(raw));
  if (derive::yields_pair(kind) == want_pair) return {};
  const std::string name(derivation_name(kind));
  return want_pair ? make_error(ErrorCode::wrong_kind, name + " yields one pointer, not a pair: use the *_ptr methods")
                   : make_error(ErrorCode::wrong_kind, name + " yields a pair, not one pointer: use the *_pair methods");
}

std::optional<DevicePtr> DerivedWeights::find_ptr(Derivation kind, const DerivationKey& key) const noexcept {
  return impl_->single(kind).find(key);
}
std::optional<DevicePair> DerivedWeights::find_pair(Derivation kind, const DerivationKey& key) const noexcept {
  return impl_->pair(kind).find(key);
}

Result<std::optional<DevicePtr>> DerivedWeights::get_ptr(Derivation kind, const DerivationKey& key) const {
  BALLAST_RETURN_IF_ERROR(check_kind(kind, false));
  return find_ptr(kind, key);
}
Result<std::optional<DevicePair>> DerivedWeights::get_pair(Derivation kind, const DerivationKey& key) const {
  BALLAST_RETURN_IF_ERROR(check_kind(kind, true));
  return find_pair(kind, key);
}

// Inserting can only fail for want of host memory (or a caller inserting
// into its own build); neither may escape as an exception.
Result<Insertion<DerivedPtr>> DerivedWeights::store_ptr(Derivation kind, const DerivationKey& key, DerivedPtr value) {
  try {
    return impl_->single(kind).insert(key, value);
  } catch (const std::bad_alloc&) {
    return memo::oom_error();
  }
}
Result<Insertion<DerivedPair>> DerivedWeights::store_pair(Derivation kind, const DerivationKey& key, DerivedPair value) {
  try {
    return impl_->pair(kind).insert(key, value);
  } catch (const std::bad_alloc&) {
    return memo::oom_error();
  }
}
Result<Insertion<DerivedPtr>> DerivedWeights::insert_ptr(Derivation kind, const DerivationKey& key, DerivedPtr value) {
  BALLAST_RETURN_IF_ERROR(check_kind(kind, false));
  return store_ptr(kind, key, value);
}
Result<Insertion<DerivedPair>> DerivedWeights::insert_pair(Derivation kind, const DerivationKey& key, DerivedPair value) {
  BALLAST_RETURN_IF_ERROR(check_kind(kind, true));
  return store_pair(kind, key, value);
}

Result<DevicePtr> DerivedWeights::build_ptr(Derivation kind, const DerivationKey& key, detail::BuildRef<DerivedPtr> build) {
  try {
    return impl_->single(kind).get_or_build(key, build);
  } catch (const std::bad_alloc&) {
    return memo::oom_error();
  }
}
Result<DevicePair> DerivedWeights::build_pair(Derivation kind, const DerivationKey& key, detail::BuildRef<DerivedPair> build) {
  try {
    return impl_->pair(kind).get_or_build(key, build);
  } catch (const std::bad_alloc&) {
    return memo::oom_error();
  }
}

Status DerivedWeights::bind_sources(std::uint64_t epoch) {
  Impl& m = *impl_;
  if (m.sources_epoch.load(std::memory_order_acquire) == epoch) return {};  // every call after the first
  std::lock_guard lock(m.bind_mutex);
  const std::uint64_t bound = m.sources_epoch.load(std::memory_order_relaxed);
  if (bound != 0 && bound != epoch && len() != 0)
    return make_error(ErrorCode::invalid_argument,
                      "memo '" + label_ + "' holds " + std::to_string(len()) +
                          " values keyed by the device pointers of sources released since (epoch " +
                          std::to_string(bound) + ", now " + std::to_string(epoch) +
                          "): new uploads may reuse those addresses, so a lookup could return another weight's "
                          "value; release the memo with its sources (a TeardownHost does), or derive into a fresh one");
  m.sources_epoch.store(epoch, std::memory_order_release);
  return {};
}

namespace {
std::string backend_text(const GpuBackend& g) {
  const DeviceInfo& d = g.info();
  return d.backend + ":" + std::to_string(d.index) + " (" + d.name + ")";
}
}  // namespace

Status DerivedWeights::bind_sources(std::uint64_t epoch, const GpuBackend& backend) {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.bind_mutex);
    if (m.backend != nullptr && m.backend != &backend && len() != 0)
      return make_error(ErrorCode::invalid_argument, "memo '" + label_ + "' holds " + std::to_string(len()) +
                                                         " values built on " + backend_text(*m.backend) + ", not on " +
                                                         backend_text(backend) +
                                                         ": a memo serves one backend; derive into a fresh one");
  }
  BALLAST_RETURN_IF_ERROR(bind_sources(epoch));
  std::lock_guard lock(m.bind_mutex);
  m.backend = &backend;
  return {};
}

std::size_t DerivedWeights::len() const noexcept {
  std::size_t n = 0;
  impl_->each([&](const auto& map) { n += map.len(); });
  return n;
}

std::uint64_t DerivedWeights::bytes() const noexcept {
  std::uint64_t n = 0;
  impl_->each([&](const auto& map) { n += map.bytes(); });
  return n;
}

DerivedWeightsStats DerivedWeights::stats() const noexcept {
  DerivedWeightsStats out;
  impl_->counters.add_to(out);
  impl_->each([&](const auto& map) { map.add_stats(out); });
  return out;
}

namespace {

// Frees values and keeps going past refusals, remembering the first.
class Freer {
 public:
  Freer(GpuBackend& backend, const std::string& label) : backend_(backend), label_(label) {}

  void free_value(Derivation kind, const DerivationKey& key, const DerivedPtr& value, const char* half) {
    // A pair's zero-byte second output (repack of a tensor with no rows) is
    // never allocated (derive.cpp's Allocations): there is nothing to free.
    if (value.first == 0) return;
    Status s = backend_.free(value.first);
    if (s.ok()) {
      out_.bytes_freed += value.bytes;
      out_.allocations_freed += 1;
      return;
    }
    out_.failed_frees += 1;
    if (!out_.status.ok()) return;
    try {
      s.error().with_context("freeing " + std::string(derivation_name(kind)) + half + " value " + hex(value.first) +
                             " of " + key.to_string());
    } catch (const std::bad_alloc&) {
      // The backend's own error still says what failed; keep going.
    }
    out_.status = std::move(s);
  }

  Released finish() && {
    try {
      if (out_.failed_frees > 1)
        out_.status.error().message += " (and " + std::to_string(out_.failed_frees - 1) + " more refused free" +
                                       (out_.failed_frees == 2 ? ")" : "s)");
      if (!out_.status.ok()) out_.status.error().with_context("releasing " + label_);
    } catch (const std::bad_alloc&) {
      // Context is a courtesy: the error and the counts are already in out_.
    }
    return std::move(out_);
  }

 private:
  GpuBackend& backend_;
  const std::string& label_;
  Released out_;
};

}  // namespace

Released DerivedWeights::release(GpuBackend& backend) {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.bind_mutex);
    if (m.backend != nullptr && m.backend != &backend && len() != 0) {
      Released out;
      out.status = make_error(ErrorCode::invalid_argument,
                              label_ + ": release on " + backend_text(backend) +
                                  ", not on the backend its values were built on, " + backend_text(*m.backend) +
                                  ": refused, nothing freed; release it on its own backend");
      return out;
    }
  }
  Freer freer(backend, label_);
  for (auto& map : m.singles)
    if (map)
      for (const auto& [key, value] : map->take_all()) freer.free_value(map->kind(), key, value, "");
  for (auto& map : m.pairs)
    if (map)
      for (const auto& [key, value] : map->take_all()) {
      freer.free_value(map->kind(), key, value.first, " first");
      freer.free_value(map->kind(), key, value.second, " second");
    }
  {
    std::lock_guard lock(m.bind_mutex);
    m.sources_epoch.store(0, std::memory_order_release);  // empty: free to serve any sources
    m.backend = nullptr;                                  // ...on any backend
  }
  return std::move(freer).finish();
}

}  // namespace ballast
