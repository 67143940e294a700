// NameTable: the per-model interning of value names to dense ids. Every
// input and output of every node passes through here while a model is
// opened, so it is an open-addressing table of (hash, id) pairs in one
// array, names packed into large chunks that never move: no allocation per
// name and one cache line per lookup in the common case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace ballast::onnx {

class NameTable {
 public:
  // Id of `name`, adding it (with the next id) when new.
  std::uint32_t intern(std::string_view name);
  std::optional<std::uint32_t> find(std::string_view name) const noexcept;
  // The name of `id`; empty for an id never handed out.
  std::string_view name(std::uint32_t id) const noexcept { return id < names_.size() ? names_[id] : std::string_view(); }
  std::size_t size() const noexcept { return names_.size(); }
  // Room for `count` more names without rehashing.
  void reserve(std::size_t count);

 private:
  struct Slot {
    std::uint32_t hash = 0;
    std::uint32_t id_plus_one = 0;  // 0: empty
  };
  static std::uint32_t hash_of(std::string_view name) noexcept;
  std::string_view copy(std::string_view name);
  void rehash(std::size_t slot_count);
  std::size_t probe(std::string_view name, std::uint32_t hash) const noexcept;

  std::vector<Slot> slots_;  // size is 0 or a power of two, at most 7/8 full
  std::vector<std::string_view> names_;
  static constexpr std::size_t kChunk = 64 * 1024;
  std::vector<std::unique_ptr<char[]>> chunks_;
  std::size_t used_ = kChunk;  // bytes used in chunks_.back()
};

}  // namespace ballast::onnx
