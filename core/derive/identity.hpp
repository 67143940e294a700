// What makes two weights, or two derivations, the same thing on a device:
// where their bytes are, never which name or ValueId reached them. Tied
// embeddings and deduplicated blobs are two names for one identity. The
// auto budget counts each identity once and paged residency holds each
// once, so the two always agree (docs/residency.md).
#pragma once

#include <ballast/derive.hpp>
#include <ballast/weight_store.hpp>

#include <cstdint>
#include <optional>
#include <tuple>

namespace ballast::identity {

// (0) nothing; (1, mapping, offset, length) bytes in a mapped file;
// (2, address, length, 0) inline bytes; (3, value index, 0, 0) a value the
// store does not hold (it fails later, by name).
using Bytes = std::tuple<int, std::uint64_t, std::uint64_t, std::uint64_t>;

Bytes of_bytes(const WeightStore& store, std::optional<ValueId> id);

// Every input a derived value depends on: its kind (-1 for a source weight
// itself), its operands' bytes, whether it reads the transposed copy, and
// the launch parameters (a slice's source row length and first column too).
using Entry = std::tuple<int, Bytes, Bytes, Bytes, bool, std::uint64_t, std::uint64_t, std::uint32_t, int, int,
                         std::uint64_t, std::uint64_t>;

Entry of_derivation(const WeightStore& store, const PlannedDerivation& p);
Entry of_source(const WeightStore& store, ValueId id);

}  // namespace ballast::identity
