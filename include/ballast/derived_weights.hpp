// DerivedWeights: a model's memo of derived weight encodings on one device.
//
// Most engines call derive_weight() / derive_weights() (derive.hpp), which plan, size,
// launch, synchronize and memoize in one call. This is the memo under them.
//
// Key:   a DerivationKey: EVERYTHING the value depends on, i.e. the launch
//        minus its outputs: the source's device pointer, the shape (rows,
//        cols), the source or scales type, the int4 block size and zero-point
//        form, and the scales and zero-point pointers. Two weights that share
//        bytes (tied embeddings, deduplicated blobs) but differ in shape, or
//        two MatMulNBits nodes sharing B with different scales, are different
//        keys; the same bytes with the same parameters are one entry, shared.
//        The memo never frees what a key points at.
// Value: what a derivation produced from it: one device pointer
//        (transpose, to_f16, dequant_int4, dequant_gguf, dequant_gguf_f32,
//        slice) or a pair (repack_int4, quant_int8, repack_gguf_int4,
//        quant_int8_given_max). The memo OWNS values and frees them in release().
//
// Prefer get_or_build_*: it looks up, and on a miss runs your `build` once
// even when many threads miss together (single-flight), outside any lock.
//
//   const DerivationKey key = DerivationKey::of(launch);   // launch: shape and operands filled, dst empty
//   Result<DevicePtr> w = memo.get_or_build_ptr(derive::transpose, key, [&]() -> Result<DerivedPtr> {
//     auto dst = gpu.allocate(bytes);
//     if (!dst) return dst.error();
//     DerivationLaunch l = launch; l.dst = *dst;
//     Status s = gpu.launch(l);
//     if (s.ok()) s = gpu.synchronize();   // never memoize a kernel that failed asynchronously
//     if (!s.ok()) { static_cast<void>(gpu.free(*dst)); return s.error(); }
//     return DerivedPtr{*dst, bytes};
//   });
//
// Kinds, two spellings:
//   derive::transpose (a tag: compile time). Asking a pair kind for a single
//     pointer, or the reverse, does not compile; calls with tags never return
//     wrong_kind.
//   Derivation::transpose (a value: run time). The wrong form returns an
//     ErrorCode::wrong_kind error; an out-of-range value, invalid_argument.
//
// Return types:
//   get_*            optional value: nullopt is a miss (also while a build
//                    for the key is still running). Run-time kinds wrap it in
//                    Result.
//   insert_*         Insertion: the value now memoized, plus `rejected` when
//                    another writer was first. The first writer always wins
//                    (other threads may already hold its pointer); a rejected
//                    value is YOURS to free.
//   get_or_build_*   Result<value>: the memoized value, or the build's error.
//
// Build contract: `build` returns Result<DerivedPtr> / Result<DerivedPair>
// (pointer plus its byte size, for the teardown report). On failure it frees
// whatever it allocated. It must not ask the memo for the (kind, key) it is
// building (that is reported as invalid_argument, not a deadlock); other
// keys are fine. If it throws, the exception is caught and becomes an
// ErrorCode::internal error for the builder and every waiter.
//
// Thread safety: every method may be called concurrently, except release()
// and destruction (teardown), which must not overlap other use. Hits take
// no lock and write no shared cache line. The destructor frees nothing
// (the memo owns no backend to free on): call release() first, on the
// backend the values were built on, e.g. through a TeardownHost. Full
// story: docs/derived_weights.md.
#pragma once

#include <ballast/export.hpp>
#include <ballast/derivation.hpp>
#include <ballast/gpu_backend.hpp>
#include <ballast/model_resource.hpp>
#include <ballast/status.hpp>

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

BALLAST_API_BEGIN

namespace ballast {

// What a memoized value depends on: every input of its launch. Build one
// from a launch with of(); the derivation itself is the map it is used in.
struct DerivationKey {
  DevicePtr source = 0;      // the weight (int4: B; quant_int8 of a transposed copy: that copy)
  DevicePtr scales = 0;      // int4, and quant_int8_given_max's rows' maxima
  DevicePtr zero_point = 0;  // int4 with zero points only
  std::uint64_t rows = 0;
  std::uint64_t cols = 0;
  std::uint32_t block_size = 0;
  DataType src_type = DataType::undefined;
  ZeroPoints zero_points = ZeroPoints::absent;
  std::uint64_t src_cols = 0;    // slice
  std::uint64_t col_offset = 0;  // slice

  static DerivationKey of(const DerivationLaunch& l) noexcept {
    return {l.src,        l.scales,      l.zero_point, l.rows, l.cols, l.block_size, l.src_type, l.zero_points,
            l.src_cols, l.col_offset};
  }
  // "source 0x7f.. [4096 x 1024] float16" plus the int4 operands and a
  // slice's columns when set.
  std::string to_string() const;
  friend bool operator==(const DerivationKey&, const DerivationKey&) = default;
};

struct DevicePair {
  DevicePtr first = 0;
  DevicePtr second = 0;
  friend bool operator==(const DevicePair&, const DevicePair&) = default;
};

// A value handed to the memo: the pointer and how many bytes it holds.
// One spelling everywhere (DevicePair, DerivedValue, Pinned): `first` is a
// value's first (or only) pointer, `second` a pair's second one.
struct DerivedPtr {
  DevicePtr first = 0;
  std::uint64_t bytes = 0;
  using value_type = DevicePtr;
  DevicePtr value() const noexcept { return first; }
  friend bool operator==(const DerivedPtr&, const DerivedPtr&) = default;
};

struct DerivedPair {
  DerivedPtr first;
  DerivedPtr second;
  using value_type = DevicePair;
  DevicePair value() const noexcept { return {first.first, second.first}; }
  friend bool operator==(const DerivedPair&, const DerivedPair&) = default;
};

// The outcome of insert_*: check `rejected`, it is yours to free.
template <class Derived>
struct [[nodiscard]] Insertion {
  typename Derived::value_type memoized{};  // what the memo holds for the key now
  std::optional<Derived> rejected;          // your value, when another writer was first
  bool inserted() const noexcept { return !rejected.has_value(); }
};

struct DerivedWeightsStats {
  std::uint64_t hits = 0;              // lookups that found a value
  std::uint64_t misses = 0;            // lookups that did not (get_* nullopt, or get_or_build that built or waited)
  std::uint64_t builds = 0;            // build calls started
  std::uint64_t failed_builds = 0;     // ...of which returned an error or threw
  std::uint64_t waits = 0;             // get_or_build calls that joined another caller's build
  std::uint64_t rejected_inserts = 0;  // insert_* calls that lost to an earlier writer
};

namespace derive {

// From the kind table (derivation_kinds.hpp), usable in constant expressions.
constexpr bool yields_pair(Derivation d) noexcept {
  return is_known_derivation(static_cast<std::uint64_t>(d)) && derivation_kind(d).pair;
}

// A derivation known at compile time.
template <Derivation K>
struct Kind {
  static constexpr Derivation value = K;
  static constexpr bool pair = yields_pair(K);
};

inline constexpr Kind<Derivation::transpose> transpose{};
inline constexpr Kind<Derivation::to_f16> to_f16{};
inline constexpr Kind<Derivation::dequant_int4> dequant_int4{};
inline constexpr Kind<Derivation::repack_int4> repack_int4{};
inline constexpr Kind<Derivation::quant_int8> quant_int8{};
inline constexpr Kind<Derivation::dequant_gguf> dequant_gguf{};
inline constexpr Kind<Derivation::dequant_gguf_f32> dequant_gguf_f32{};
inline constexpr Kind<Derivation::repack_gguf_int4> repack_gguf_int4{};
inline constexpr Kind<Derivation::quant_int8_given_max> quant_int8_given_max{};
inline constexpr Kind<Derivation::slice> slice{};
static_assert(kDerivationCount == 10, "every Derivation has its tag above: add the new kind's");

template <class T>
concept kind_tag = std::same_as<std::remove_cvref_t<T>, Kind<std::remove_cvref_t<T>::value>>;
// Derivations whose value is one pointer: use the *_ptr methods.
template <class T>
concept single_kind = kind_tag<T> && !std::remove_cvref_t<T>::pair;
// Derivations whose value is a pair: use the *_pair methods.
template <class T>
concept pair_kind = kind_tag<T> && std::remove_cvref_t<T>::pair;

// A build for values of type Derived (DerivedPtr or DerivedPair): callable
// with no arguments, returning Result<Derived> or something that converts.
template <class F, class Derived>
concept build_of = std::invocable<F&> && std::convertible_to<std::invoke_result_t<F&>, Result<Derived>>;

}  // namespace derive

namespace detail {
// A non-owning, non-allocating reference to a build callable, so the hot
// path never constructs a std::function.
template <class Derived>
class BuildRef {
 public:
  template <class F>
  explicit BuildRef(F& f) noexcept
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* o) -> Result<Derived> { return std::invoke(*static_cast<F*>(o)); }) {}
  Result<Derived> operator()() const { return call_(object_); }

 private:
  void* object_;
  Result<Derived> (*call_)(void*);
};
}  // namespace detail

class DerivedWeights final : public ModelResource<GpuBackend> {
 public:
  explicit DerivedWeights(std::string label = "derived weights");
  ~DerivedWeights() override;
  DerivedWeights(const DerivedWeights&) = delete;
  DerivedWeights& operator=(const DerivedWeights&) = delete;

  // --- lookups -------------------------------------------------------------
  template <derive::single_kind K>
  std::optional<DevicePtr> get_ptr(K, const DerivationKey& key) const noexcept { return find_ptr(K::value, key); }
  template <derive::pair_kind K>
  std::optional<DevicePair> get_pair(K, const DerivationKey& key) const noexcept { return find_pair(K::value, key); }
  Result<std::optional<DevicePtr>> get_ptr(Derivation kind, const DerivationKey& key) const;
  Result<std::optional<DevicePair>> get_pair(Derivation kind, const DerivationKey& key) const;

  // --- raw stores (for callers that allocate and launch between a get and
  // the insert; otherwise use get_or_build_*). If a build of the key is in
  // flight, insert waits for it and loses to it when it succeeds. ---------
  template <derive::single_kind K>
  Result<Insertion<DerivedPtr>> insert_ptr(K, const DerivationKey& key, DerivedPtr value) {
    return store_ptr(K::value, key, value);
  }
  template <derive::pair_kind K>
  Result<Insertion<DerivedPair>> insert_pair(K, const DerivationKey& key, DerivedPair value) {
    return store_pair(K::value, key, value);
  }
  Result<Insertion<DerivedPtr>> insert_ptr(Derivation kind, const DerivationKey& key, DerivedPtr value);
  Result<Insertion<DerivedPair>> insert_pair(Derivation kind, const DerivationKey& key, DerivedPair value);

  // --- look up, building once on a miss ------------------------------------
  template <derive::single_kind K, derive::build_of<DerivedPtr> Build>
  Result<DevicePtr> get_or_build_ptr(K, const DerivationKey& key, Build&& build) {
    return build_ptr(K::value, key, detail::BuildRef<DerivedPtr>(build));
  }
  template <derive::pair_kind K, derive::build_of<DerivedPair> Build>
  Result<DevicePair> get_or_build_pair(K, const DerivationKey& key, Build&& build) {
    return build_pair(K::value, key, detail::BuildRef<DerivedPair>(build));
  }
  template <derive::build_of<DerivedPtr> Build>
  Result<DevicePtr> get_or_build_ptr(Derivation kind, const DerivationKey& key, Build&& build) {
    if (Status s = check_kind(kind, false); !s.ok()) return s;
    return build_ptr(kind, key, detail::BuildRef<DerivedPtr>(build));
  }
  template <derive::build_of<DerivedPair> Build>
  Result<DevicePair> get_or_build_pair(Derivation kind, const DerivationKey& key, Build&& build) {
    if (Status s = check_kind(kind, true); !s.ok()) return s;
    return build_pair(kind, key, detail::BuildRef<DerivedPair>(build));
  }

  // --- the sources the keys point at ---------------------------------------
  // Keys hold the sources' device pointers, which name the same bytes only
  // while those allocations live. Ties the memo to the sources of `epoch`
  // (DeviceWeights::epoch()): ok while the memo is empty or tied to it
  // already; invalid_argument while it holds values keyed by the pointers
  // of sources released since (new uploads may reuse their addresses, and
  // a lookup would return another weight's value). derive_weight() and
  // derive_weights() call it; release() unties the memo.
  Status bind_sources(std::uint64_t epoch);
  // The same, and ties the memo to `backend`, the one its values are built
  // on (derive_weight() and derive_weights() pass ctx.backend):
  // invalid_argument while it holds values built on another, and release()
  // on another backend is then refused whole, nothing freed or forgotten.
  Status bind_sources(std::uint64_t epoch, const GpuBackend& backend);

  // --- accounting ----------------------------------------------------------
  std::size_t len() const noexcept;  // memoized entries, every kind (builds in flight excluded)
  bool is_empty() const noexcept { return len() == 0; }
  std::uint64_t bytes() const noexcept;  // sum of the memoized values' byte sizes
  DerivedWeightsStats stats() const noexcept;

  // --- ModelResource<GpuBackend> -------------------------------------------
  std::string label() const override { return label_; }
  // Frees every value (both halves of a pair), never a key. The memo is
  // empty afterwards even when frees fail: a refused free is counted and
  // reported (the first error, with its kind and key) rather than retried,
  // since a pointer the backend refused once is not one it will take later.
  // A memo tied to a backend (bind_sources) refuses a release on another
  // one whole, invalid_argument, keeping every value: each free there would
  // be refused, and the values forgotten would stay live on their own.
  Released release(GpuBackend& backend) override;

 private:
  struct BALLAST_HIDDEN Impl;

  static Status check_kind(Derivation kind, bool want_pair);
  std::optional<DevicePtr> find_ptr(Derivation kind, const DerivationKey& key) const noexcept;
  std::optional<DevicePair> find_pair(Derivation kind, const DerivationKey& key) const noexcept;
  Result<Insertion<DerivedPtr>> store_ptr(Derivation kind, const DerivationKey& key, DerivedPtr value);
  Result<Insertion<DerivedPair>> store_pair(Derivation kind, const DerivationKey& key, DerivedPair value);
  Result<DevicePtr> build_ptr(Derivation kind, const DerivationKey& key, detail::BuildRef<DerivedPtr> build);
  Result<DevicePair> build_pair(Derivation kind, const DerivationKey& key, detail::BuildRef<DerivedPair> build);

  std::string label_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ballast

BALLAST_API_END
