// Communicator::exchange's default: a round built from messages
// (communicator.hpp). Each rank sends every peer exactly one message per
// round, an empty one for nothing, so the k-th message from a peer is its
// k-th round's; messages from one peer arrive in order. A peer that ended
// this round sooner may already have sent the next one: it is kept for
// the next call.
#include <ballast/communicator.hpp>

namespace ballast {

Result<std::vector<std::vector<std::byte>>> Communicator::exchange(std::vector<std::vector<std::byte>> to,
                                                                   std::chrono::steady_clock::time_point deadline) {
  const std::uint32_t me = rank(), n = world();
  if (to.size() != n)
    return make_error(ErrorCode::invalid_argument, "an exchange of " + std::to_string(to.size()) +
                                                       " buffers in a world of " + std::to_string(n));
  if (!any_source())
    return make_error(ErrorCode::unsupported, name() + " has neither messages nor its own exchange");
  std::vector<std::vector<std::byte>> from(n);
  std::vector<bool> heard(n, false);
  from[me] = std::move(to[me]);
  heard[me] = true;
  for (std::uint32_t q = 0; q < n; ++q)
    if (q != me) BALLAST_RETURN_IF_ERROR(send(q, std::move(to[q])), "an exchange round's buffer for rank " + std::to_string(q));
  if (early_.size() != n) early_.resize(n);
  std::uint32_t missing = n - 1;
  for (std::uint32_t p = 0; p < n; ++p) {
    if (p == me || early_[p].empty()) continue;
    from[p] = std::move(early_[p].front());
    early_[p].pop_front();
    heard[p] = true;
    --missing;
  }
  while (missing > 0) {
    BALLAST_ASSIGN_OR_RETURN(auto message, receive(deadline));
    if (!message) {
      std::string who;
      for (std::uint32_t p = 0; p < n; ++p)
        if (!heard[p]) who += (who.empty() ? "" : ", ") + std::to_string(p);
      return make_error(ErrorCode::unavailable, "rank " + std::to_string(me) + ": nothing came in time from rank(s) " +
                                                    who + " in an exchange round");
    }
    if (message->from >= n || message->from == me)
      return make_error(ErrorCode::malformed, "an exchange round's message from rank " + std::to_string(message->from) +
                                                  " (world " + std::to_string(n) + ")");
    if (heard[message->from]) {
      early_[message->from].push_back(std::move(message->bytes));
      continue;
    }
    from[message->from] = std::move(message->bytes);
    heard[message->from] = true;
    --missing;
  }
  return from;
}

}  // namespace ballast
