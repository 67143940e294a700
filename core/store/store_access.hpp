// The loader's access to WeightStore internals that engines have no use
// for: the mapping of the .onnx itself, whose bytes inline weights borrow,
// and the weights map itself (public code reads it; WeightStore::add() is
// the checked way in for everyone else).
#pragma once

#include <ballast/weight_store.hpp>

#include "store/mapped_file.hpp"

#include <memory>
#include <unordered_map>

namespace ballast::store {

struct StoreAccess {
  // Records (and keeps alive) the .onnx mapping, so that check_unchanged
  // and copy_bytes treat inline weights borrowed from it like external ones.
  static void set_model_file(WeightStore& store, std::shared_ptr<const MappedFile> file);
  static std::shared_ptr<const MappedFile> model_file(const WeightStore& store);
  // Marks the first `bytes` of mapping `id` as the format's header
  // (safetensors' JSON): counted as neither referenced nor dead.
  static void set_header_bytes(WeightStore& store, MappingId id, std::uint64_t bytes);
  // The mapping `id` (nullptr when there is none).
  static std::shared_ptr<const MappedFile> mapping(const WeightStore& store, MappingId id);
  // Makes `into` (a new store, with no files of its own yet) hold the very
  // mappings of `from`, under the same ids, with its .onnx mapping and what
  // it keeps alive: a store of views into another's files (rank_model of
  // in-place shards). The files were opened once; both stores check the
  // same recorded size and time when asked whether a file changed. Refused
  // (invalid_argument) when `into` maps a file already.
  static Status share_files(WeightStore& into, const WeightStore& from);
  // The weights map, writable: the loader checks each weight's range as it
  // decodes it (and white-box tests build what add() would refuse).
  static std::unordered_map<ValueId, WeightRef>& weights(WeightStore& store) { return store.weights_; }
};

}  // namespace ballast::store
