#include "derive/identity.hpp"

namespace ballast::identity {

Bytes of_bytes(const WeightStore& store, std::optional<ValueId> id) {
  if (!id) return {0, 0, 0, 0};
  auto it = store.weights().find(*id);
  if (it != store.weights().end()) {
    const WeightRef& w = it->second;
    if (w.is_external()) {
      if (auto p = store.external_mmap_provenance(w)) return {1, p->mapping, p->offset, p->length};
    } else {
      return {2, reinterpret_cast<std::uintptr_t>(w.inline_bytes.data()), w.inline_bytes.size(), 0};
    }
  }
  return {3, id->index, 0, 0};
}

Entry of_derivation(const WeightStore& store, const PlannedDerivation& p) {
  const DerivationLaunch& l = p.launch;
  return {static_cast<int>(p.kind()), of_bytes(store, p.source), of_bytes(store, p.scales),
          of_bytes(store, p.zero_points), p.of_transposed, l.rows, l.cols, l.block_size,
          static_cast<int>(l.src_type), static_cast<int>(l.zero_points), l.src_cols, l.col_offset};
}

Entry of_source(const WeightStore& store, ValueId id) {
  return {-1, of_bytes(store, id), {}, {}, false, 0, 0, 0, 0, 0, 0, 0};
}

}  // namespace ballast::identity
