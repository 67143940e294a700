// The handle table (handles.hpp says why handles are numbers).
#include "capi/handles.hpp"

#include <mutex>
#include <vector>

namespace ballast::capi {

namespace {

struct Slot {
  std::uint32_t generation = 1;  // never 0: a zero handle word is NULL
  Kind kind = Kind::model;
  std::shared_ptr<void> object;  // null when free
};

struct Table {
  std::mutex mutex;
  std::vector<Slot> slots;
  std::vector<std::uint32_t> free_slots;
};

Table& table() {
  static Table* t = new Table;  // never destroyed: handles may be freed from atexit handlers
  return *t;
}

constexpr std::uint32_t kMaxSlots = 1u << 24;

struct Decoded {
  std::uint32_t generation;
  std::uint32_t slot;
  std::uint8_t kind;
};

Decoded decode(const void* handle) noexcept {
  const auto v = reinterpret_cast<std::uintptr_t>(handle);
  return {static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) >> 32),
          static_cast<std::uint32_t>((v >> 8) & 0xFFFFFFu), static_cast<std::uint8_t>(v & 0xFFu)};
}

// The slot a handle names while it is live, or null.
Slot* live_slot(Table& t, const void* handle, Kind kind) noexcept {
  if (handle == nullptr) return nullptr;
  const Decoded d = decode(handle);
  if (d.kind != static_cast<std::uint8_t>(kind) || d.slot >= t.slots.size()) return nullptr;
  // at(), not []: the bound above is what keeps a forged handle out, and
  // were it off by one, at() would end the process (this is noexcept)
  // where [] would read past the table unseen (unit_capi_misuse forges
  // the handle one past the last slot).
  Slot& s = t.slots.at(d.slot);
  if (!s.object || s.kind != kind || s.generation != d.generation) return nullptr;
  return &s;
}

}  // namespace

static_assert(sizeof(void*) == 8, "handles encode a 32-bit generation beside the slot: 64-bit targets only");

const char* kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::model: return "model";
    case Kind::backend: return "backend";
    case Kind::plan: return "plan";
    case Kind::residency: return "residency";
    case Kind::pin: return "pin";
  }
  return "handle";
}

void* insert_handle(Kind kind, std::shared_ptr<void> object) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  std::uint32_t index;
  if (!t.free_slots.empty()) {
    index = t.free_slots.back();
    t.free_slots.pop_back();
  } else {
    if (t.slots.size() >= kMaxSlots) throw std::bad_alloc();
    t.slots.emplace_back();
    index = static_cast<std::uint32_t>(t.slots.size() - 1);
  }
  Slot& s = t.slots[index];
  s.kind = kind;
  s.object = std::move(object);
  const std::uint64_t v = (static_cast<std::uint64_t>(s.generation) << 32) | (std::uint64_t{index} << 8) |
                          static_cast<std::uint8_t>(kind);
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v));
}

std::shared_ptr<void> find_handle(const void* handle, Kind kind) noexcept {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  Slot* s = live_slot(t, handle, kind);
  return s ? s->object : nullptr;
}

std::shared_ptr<void> remove_handle(const void* handle, Kind kind) noexcept {
  Table& t = table();
  std::shared_ptr<void> object;
  std::lock_guard lock(t.mutex);
  Slot* s = live_slot(t, handle, kind);
  if (s == nullptr) return nullptr;
  object = std::move(s->object);
  s->object.reset();
  if (++s->generation == 0) s->generation = 1;
  const auto index = static_cast<std::uint32_t>(s - t.slots.data());
  try {
    t.free_slots.push_back(index);
  } catch (...) {
    // The slot is lost to reuse, never to validation: it stays retired.
  }
  return object;
}

}  // namespace ballast::capi
