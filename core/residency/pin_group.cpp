// Residency::pin(group): every member pinned or none, with a bounded wait
// for room. A single pin never waits for another pin to go (two threads
// each holding what the other needs would deadlock); a group can, because
// it holds nothing while it waits: a failed attempt unpins what it took
// first. Attempts are taken one group at a time (group_admission), so two
// groups that do not fit together cannot keep failing each other: the
// first to get in takes all it needs, the second waits for its release.
// (Not fair: a thread that releases and pins again at once may get in
// first again; the waiter's deadline bounds what that costs it.)
#include "residency/impl.hpp"

#include <set>

namespace ballast {

using residency::Entry;
using residency::bytes_text;

// Unpins this thread made (Impl::unpin): a group's own releases and its
// builds' operands, which are not room another thread gave back.
extern thread_local std::uint64_t unpins_by_this_thread;

Result<PinnedSet> Residency::Impl::pin_group(const ResidencyGroup& group, std::chrono::milliseconds wait_for_room) {
  // Saturated: now + a wait past the clock's range (milliseconds::max() as
  // "wait as long as it takes") overflowed into the past, and the group
  // failed at once, saying it had waited that long.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point now = Clock::now();
  const auto reach = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now);
  const Clock::time_point deadline = wait_for_room.count() <= 0 ? now
                                     : wait_for_room >= reach   ? Clock::time_point::max()
                                                                : now + wait_for_room;
  const std::string what = "group '" + group.name + "'";
  // Every member's entry first: an unknown weight or a derivation that
  // cannot be sized fails before anything is pinned.
  std::set<Entry*> members;
  for (const PlannedDerivation& p : group.derivations) {
    auto e = derived_entry(p);
    if (!e.ok()) return std::move(e.error()).with_context("pinning " + what);
    members.insert(*e);
  }
  for (ValueId id : group.weights) {
    if (strategy_of(id) == ResidencyStrategy::zero_copy) continue;  // registered: no device bytes
    auto e = source_entry(id);
    if (!e.ok()) return std::move(e.error()).with_context("pinning " + what);
    members.insert(*e);
  }
  std::uint64_t group_bytes = 0;
  for (const Entry* e : members) group_bytes += e->bytes();
  const std::size_t count = group.derivations.size() + group.weights.size();
  // Larger than the whole budget: no wait can let it in. Asked before
  // every attempt, and by the wait, since set_budget() may lower the
  // budget under a group that is waiting (it wakes the waiters).
  const auto too_large = [&] { return group_bytes > budget; };  // under `mutex`
  const auto larger_than_budget = [&] {
    return make_error(ErrorCode::out_of_memory, what + " needs " + bytes_text(group_bytes) + " pinned at once (" +
                                                    std::to_string(count) + " members), more than the budget of " +
                                                    bytes_text(budget));
  };
  {
    std::lock_guard lock(mutex);
    if (too_large()) return larger_than_budget();
  }

  std::unique_lock admitted(group_admission);
  Status refused;  // the last member refusal, for the final error
  for (;;) {
    std::uint64_t seen_unpins = 0, own_before = 0;
    bool short_of_room = false;
    {
      std::lock_guard lock(mutex);
      if (too_large()) return larger_than_budget();
      seen_unpins = unpins;
      own_before = unpins_by_this_thread;
      // What the members not pinned already add to the pins: above the
      // budget, no attempt can succeed until pins go, so none is made
      // (nothing paged in, nothing built, nothing pinned).
      std::uint64_t adding = 0;
      for (const Entry* e : members)
        if (e->pins == 0) adding += e->bytes();
      short_of_room = pinned > budget || adding > budget - pinned;
    }
    if (!short_of_room) {
      PinnedSet set;
      Status failed;
      for (const PlannedDerivation& p : group.derivations) {
        auto pin = pin_derived(p, Use::pin);
        if (!pin.ok()) {
          failed = pin.status();
          break;
        }
        set.derived.push_back(std::move(*pin));
      }
      for (std::size_t i = 0; failed.ok() && i < group.weights.size(); ++i) {
        auto pin = pin_source(group.weights[i], Use::pin);
        if (!pin.ok()) {
          failed = pin.status();
          break;
        }
        set.weights.push_back(std::move(*pin));
      }
      if (failed.ok()) return set;
      set.reset();  // all or none: the members taken so far stay resident, unpinned
      if (failed.code() != ErrorCode::out_of_memory) return std::move(failed).with_context("pinning " + what);
      refused = std::move(failed);
    }

    // Wait, holding nothing, for another caller's unpin (this thread's own
    // releases above do not count), or give up at the deadline.
    admitted.unlock();
    std::unique_lock lock(mutex);
    // Room that came while the attempt ran counts too: the attempt may
    // have failed on pins another thread has let go of since (its check
    // above cannot count a build's transient operand pins), and with
    // nothing pinned now there would be nothing left to wait for.
    const std::uint64_t own = unpins_by_this_thread - own_before;
    const auto others_released = [&] { return unpins - seen_unpins > own; };
    const bool others_may_release = pinned > 0 || prefetch_loads > 0;
    // Past the deadline no attempt starts, whatever came: a thread that
    // keeps releasing and pinning again would otherwise hold a 0 ms wait in
    // this loop for as long as it runs. (The last attempt may start just
    // before the deadline and end after it, by one attempt's time.)
    const auto woken = [&] { return others_released() || too_large(); };
    const bool room_came =
        Clock::now() < deadline && (woken() || (others_may_release && changed.wait_until(lock, deadline, woken)));
    if (too_large()) return larger_than_budget();
    if (!room_came) {
      std::string message = "budget of " + bytes_text(budget) + " cannot take " + what + " (" +
                            bytes_text(group_bytes) + " in " + std::to_string(count) + " members) beside " +
                            bytes_text(pinned) + " pinned, " + bytes_text(held) + " held in all";
      if (wait_for_room.count() > 0)
        message += ", after waiting " + std::to_string(wait_for_room.count()) + " ms for pins to be released";
      if (!refused.ok()) message += " (refused: " + refused.to_string() + ")";
      return make_error(ErrorCode::out_of_memory, std::move(message));
    }
    lock.unlock();
    admitted.lock();
  }
}

}  // namespace ballast
