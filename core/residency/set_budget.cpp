// Residency::set_budget: an engine moving device memory between its weights
// and something else (a KV cache that grows, a second model) changes the
// budget of a live residency.
#include "residency/impl.hpp"

#include <algorithm>
#include <new>

namespace ballast {

using residency::bytes_text;
using residency::Entry;

Status Residency::set_budget(std::uint64_t bytes) {
  // Host memory running out builds no message: out_of_memory, nothing
  // changed (every step that changes anything allocates nothing).
  try {
    return impl_->set_budget(bytes);
  } catch (const std::bad_alloc&) {
    return residency::out_of_host_memory();
  }
}

Status Residency::Impl::set_budget(std::uint64_t bytes) {
  Impl& m = *this;
  const std::string context = m.label + ": setting the budget to " + bytes_text(bytes);
  std::lock_guard lock(m.mutex);
  BALLAST_RETURN_IF_ERROR(m.refuse_after_release_locked(), context);
  if (!m.sized)
    return make_error(ErrorCode::invalid_argument,
                      "this residency was created without a budget, so nothing sized one for it: create it with "
                      "budget_bytes (or paged, for the auto budget) to change its budget later")
        .with_context(context);
  // The rule create() applied: the largest pin beside what stays.
  BALLAST_RETURN_IF_ERROR(m.check_budget(bytes), context);
  if (bytes < m.held) {
    // Lowered below what is held: frees the backend refused once may go
    // through now, then the pool and the evictable entries go, in the
    // policy's order. Decided first, so that a budget that cannot be met
    // (pins, values being loaded, what stays) evicts nothing for nothing.
    while (m.retry_stuck_locked()) {
    }
    std::uint64_t movable = m.pool.bytes();
    for (const Entry* e : m.all)
      if (residency::evictable_now(*e)) movable += e->bytes();
    if (m.held - std::min(m.held, movable) > bytes) {
      std::string message = bytes_text(m.held) + " held, of which " + bytes_text(m.pinned) + " pinned and " +
                            bytes_text(m.held - std::min(m.held, movable)) +
                            " that cannot be evicted now (pinned, being loaded, kept for the model's life, or "
                            "frees the device refused); the budget stays " +
                            bytes_text(m.budget);
      return make_error(ErrorCode::out_of_memory, std::move(message)).with_context(context);
    }
    while (m.held > bytes) {
      if (m.release_pooled_locked()) continue;
      Entry* victim = m.eviction.choose(m.clock, residency::Requester::demand, m.held - bytes);
      if (victim == nullptr) break;
      m.evict_locked(*victim);
    }
    // Only a free the backend refused on the way can leave it above.
    if (m.held > bytes)
      return make_error(ErrorCode::out_of_memory,
                        bytes_text(m.held) + " still held after evicting, " + bytes_text(m.stuck_bytes()) +
                            " of them frees the device refused; the budget stays " + bytes_text(m.budget))
          .with_context(context);
  }
  const bool raised = bytes > m.budget;
  const bool changed = bytes != m.budget;
  m.budget = bytes;
  // Raised: room for the pins that wait for it (pin(group, wait) counts it
  // as an unpin of another caller's), and for a demand load waiting on
  // prefetches. Lowered: a waiting group the budget can no longer hold
  // fails at once instead of at its deadline.
  if (raised) ++m.unpins;
  if (changed) m.changed.notify_all();
  return Status();
}

}  // namespace ballast
