// The handle table: why a C handle is a number and not a pointer.
//
// A C caller can hand back anything: a handle it already freed, one freed
// twice, a model where a backend is wanted, garbage. A pointer to the object
// would be dereferenced before anything could check it. So a handle is
// (generation << 32) | (slot << 8) | kind: the table checks the kind and the
// slot's current generation under its lock before any object is touched;
// freeing bumps the slot's generation, so every copy of the old value is
// refused from then on (BALLAST_E_INVALID_HANDLE). A slot reused 2^32 times
// would repeat a generation; nothing real frees that often.
//
// Objects are held by shared_ptr: a call looks its handle up and keeps the
// object alive for its duration, so a free racing a use on another thread
// never destroys the object under it; dependents (a residency of its model
// and backend, a pin of its residency) hold theirs the same way.
#pragma once

#include <cstdint>
#include <memory>

namespace ballast::capi {

enum class Kind : std::uint8_t { model = 0xA1, backend = 0xA2, plan = 0xA3, residency = 0xA4, pin = 0xA5 };
const char* kind_name(Kind kind) noexcept;

// Registers `object`; returns its handle value. Throws bad_alloc only.
void* insert_handle(Kind kind, std::shared_ptr<void> object);
// The object of a live handle of `kind`, or null.
std::shared_ptr<void> find_handle(const void* handle, Kind kind) noexcept;
// Retires a live handle and returns its object (the caller drops it outside
// the lock: destructors may release device memory); null when not live.
std::shared_ptr<void> remove_handle(const void* handle, Kind kind) noexcept;

template <class T>
std::shared_ptr<T> find(const void* handle, Kind kind) noexcept {
  return std::static_pointer_cast<T>(find_handle(handle, kind));
}

}  // namespace ballast::capi
