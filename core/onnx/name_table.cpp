#include "onnx/name_table.hpp"

#include <cstring>

namespace ballast::onnx {

namespace {

std::uint64_t load8(const char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::uint32_t load4(const char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v;
  h *= 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

}  // namespace

// Eight bytes at a time, the last word overlapping the one before: names
// are short, and a byte-wise hash (or a memcpy call per tail) was the
// largest single cost of opening a model with many nodes.
std::uint32_t NameTable::hash_of(std::string_view name) noexcept {
  const char* p = name.data();
  const std::size_t n = name.size();
  std::uint64_t h = 0x243f6a8885a308d3ull ^ n;
  if (n >= 8) {
    std::size_t i = 0;
    for (; i + 8 < n; i += 8) h = mix(h, load8(p + i));
    h = mix(h, load8(p + n - 8));
  } else if (n >= 4) {
    h = mix(h, (std::uint64_t{load4(p)} << 32) | load4(p + n - 4));
  } else if (n != 0) {
    h = mix(h, (std::uint64_t{static_cast<unsigned char>(p[0])} << 16) |
                   (std::uint64_t{static_cast<unsigned char>(p[n / 2])} << 8) | static_cast<unsigned char>(p[n - 1]));
  }
  h = mix(h, 0xff51afd7ed558ccdull);
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

std::size_t NameTable::probe(std::string_view name, std::uint32_t hash) const noexcept {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id_plus_one == 0 || (s.hash == hash && names_[s.id_plus_one - 1] == name)) return i;
  }
}

std::optional<std::uint32_t> NameTable::find(std::string_view name) const noexcept {
  if (slots_.empty()) return std::nullopt;
  const Slot& s = slots_[probe(name, hash_of(name))];
  if (s.id_plus_one == 0) return std::nullopt;
  return s.id_plus_one - 1;
}

std::uint32_t NameTable::intern(std::string_view name) {
  if ((names_.size() + 1) * 8 > slots_.size() * 7) rehash(slots_.empty() ? 64 : slots_.size() * 2);
  const std::uint32_t hash = hash_of(name);
  Slot& s = slots_[probe(name, hash)];
  if (s.id_plus_one != 0) return s.id_plus_one - 1;
  const auto id = static_cast<std::uint32_t>(names_.size());
  names_.push_back(copy(name));
  s = Slot{hash, id + 1};
  return id;
}

void NameTable::reserve(std::size_t count) {
  const std::size_t want = (names_.size() + count) * 8 / 7 + 1;
  std::size_t slots = slots_.empty() ? 64 : slots_.size();
  while (slots < want) slots *= 2;
  if (slots != slots_.size()) rehash(slots);
  names_.reserve(names_.size() + count);
}

void NameTable::rehash(std::size_t slot_count) {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slot_count, Slot{});
  const std::size_t mask = slot_count - 1;
  for (const Slot& s : old) {
    if (s.id_plus_one == 0) continue;
    std::size_t i = s.hash & mask;
    while (slots_[i].id_plus_one != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

std::string_view NameTable::copy(std::string_view name) {
  if (name.empty()) return {};
  if (name.size() > kChunk / 4) {  // a huge name gets a chunk of its own, before the current one
    auto own = std::make_unique<char[]>(name.size());
    std::memcpy(own.get(), name.data(), name.size());
    const char* data = own.get();
    chunks_.insert(chunks_.empty() ? chunks_.end() : chunks_.end() - 1, std::move(own));
    return {data, name.size()};
  }
  if (kChunk - used_ < name.size()) {
    chunks_.push_back(std::make_unique<char[]>(kChunk));
    used_ = 0;
  }
  char* at = chunks_.back().get() + used_;
  std::memcpy(at, name.data(), name.size());
  used_ += name.size();
  return {at, name.size()};
}

}  // namespace ballast::onnx
