// Pins: the handle an engine addresses a device value by. A value is only
// reachable through a pin because only a pinned value is guaranteed not to
// be evicted (and its pointer not reused) while it is read.
#include "capi/objects.hpp"

#include <span>

using namespace ballast;
using namespace ballast::capi;

namespace {

ballast_status* member_of(const PinObject& p, std::size_t member) {
  if (member >= p.members.size())
    return out_of_bounds("out_of_bounds: member " + std::to_string(member) + " of a pin of " +
                         std::to_string(p.members.size()));
  return nullptr;
}

}  // namespace

extern "C" {

ballast_status* ballast_pin_free(ballast_pin* pin) {
  if (pin == nullptr) return nullptr;
  return guarded([&]() -> ballast_status* {
    return remove_handle(pin, Kind::pin) ? nullptr : bad_handle(Kind::pin, pin);
  });
}

ballast_status* ballast_pin_count(const ballast_pin* pin, size_t* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = null_out(out, "the output");
    if (e) return e;
    auto p = lookup<PinObject>(pin, Kind::pin, &e);
    if (!p) return e;
    *out = p->members.size();
    return nullptr;
  });
}

ballast_status* ballast_pin_value(const ballast_pin* pin, size_t member, ballast_value* out) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto p = lookup<PinObject>(pin, Kind::pin, &e);
    if (!p) return e;
    if ((e = member_of(*p, member))) return e;
    // After release() the addresses are freed memory: an engine must not
    // be handed one to launch on (as pin reads, refused).
    PassingLock lock(p->owner->gate);  // a use of a pin already held passes a waiting release (gate.hpp)
    if (p->owner->released) return invalid_argument("invalid_argument: the residency was released");
    const Pinned& m = p->members[member];
    ballast_value v{};
    v.first = m.first();
    v.second = m.second();
    v.first_bytes = m.first_bytes();
    v.second_bytes = m.second_bytes();
    return write_out(v, out);
  });
}

ballast_status* ballast_pin_read(const ballast_pin* pin, size_t member, int half, uint64_t offset, void* dst,
                                 size_t dst_length, uint64_t length) {
  return guarded([&]() -> ballast_status* {
    ballast_status* e = nullptr;
    auto p = lookup<PinObject>(pin, Kind::pin, &e);
    if (!p) return e;
    if ((e = member_of(*p, member))) return e;
    if (half != 0 && half != 1) return invalid_argument("invalid_argument: half must be 0 (first) or 1 (second)");
    if ((e = check_buffer(dst, dst_length, length))) return e;
    const Pinned& m = p->members[member];
    const std::uint64_t bytes = half == 0 ? m.first_bytes() : m.second_bytes();
    if (offset > bytes || length > bytes - offset)
      return out_of_bounds("out_of_bounds: bytes [" + std::to_string(offset) + ", +" + std::to_string(length) +
                           ") are not inside the " + (half == 0 ? "first" : "second") + " half of " +
                           (member < p->names.size() ? p->names[member] : "member " + std::to_string(member)) + " (" +
                           std::to_string(bytes) + " bytes)");
    // Under the residency's gate: release() cannot free the value mid-copy.
    PassingLock lock(p->owner->gate);  // a use of a pin already held passes a waiting release (gate.hpp)
    // Before the empty read's early return: a pin of a released residency
    // reads nothing, not even nothing (as pin_value refuses it).
    if (p->owner->released) return invalid_argument("invalid_argument: the residency was released");
    if (length == 0) return nullptr;
    Status copied = p->owner->backend->backend->copy_to_host(std::span<std::byte>(static_cast<std::byte*>(dst), length),
                                                             half == 0 ? m.first() : m.second(), offset);
    if (!copied.ok()) return from_status(copied);
    // A weight read in place read its file's pages: a page a truncation took
    // read as zeros (the registration's guard) and poisoned the file, so the
    // file is checked now, or those zeros would pass for its bytes.
    const WeightRef* in_place = member < p->in_place.size() ? p->in_place[member] : nullptr;
    if (in_place == nullptr) return nullptr;
    Status unchanged = p->owner->model->model.store().check_unchanged(*in_place);
    if (unchanged.ok()) return nullptr;
    Error error = unchanged.error();
    error.with_context("reading " + (member < p->names.size() ? p->names[member] : "member " + std::to_string(member)) +
                       " in place");
    return from_error(error);
  });
}

}  // extern "C"
