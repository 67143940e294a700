// cooperative_load: this rank reads its part of the checkpoint, keeps
// what its shards take, sends each other rank what theirs take, and
// receives its own from the others (cooperative_load.hpp).
//
// A message is one read chunk's worth for one receiver: a header naming
// the file stretch [offset, offset + length) of a mapping, then the bytes
// of the receiver's pieces inside it, packed in the canonical order
// (for_each_run). The receiver unpacks with its own pieces in the same
// order, so the payload carries no per-piece description; a payload of
// another size than its pieces take (ranks with different models or
// plans) is refused, never placed.
//
// In rounds (a communicator without messages, or asked for), the same
// messages are gathered per peer instead of sent, and traded when a rank
// has gathered round_bytes, and after its reads until every rank's are
// done: each round's buffer for a peer starts with a word saying whether
// the sender has read everything, so every rank sees the same words and
// stops after the same round.
#include <ballast/cooperative_load.hpp>

#include "dist/pieces.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <new>

namespace ballast {

namespace {

using Clock = std::chrono::steady_clock;

struct Header {
  std::uint32_t mapping = 0;
  std::uint32_t reserved = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};
static_assert(sizeof(Header) == 24);

// A round's buffer opens with this: the sender's reads are all done.
constexpr std::uint64_t kRoundDone = 1;
// A message of a header only, with this mapping: "still reading", and
// "read everything, sent everything" (messages; rounds carry it in their word).
constexpr std::uint32_t kKeepAlive = UINT32_MAX;
constexpr std::uint32_t kDone = UINT32_MAX - 1;
constexpr std::uint64_t kRoundMagic = 0x62616c6c72000000ull;  // "ballr" in the high bytes
// The first round's word: each rank's exchange mode in its low bit.
constexpr std::uint64_t kHelloMagic = 0x62616c6c68000000ull;  // "ballh"

class Load {
 public:
  Load(const Model& model, const ShardPlans& plans, const CooperativeLoadPlan& load, Communicator& comm,
       const CooperativeLoadOptions& options)
      : model_(model), plans_(plans), load_(load), comm_(comm), options_(options), rank_(comm.rank()),
        world_(comm.world()) {}

  Result<RankShards> run() {
    const auto started = Clock::now();
    const ShardPlan& mine = plans_.ranks[rank_];
    out_.report.rank = rank_;
    // One arena for every shard, each at a 64-byte boundary.
    std::uint64_t total = 0;
    for (const WeightShard& s : mine.weights) total += (s.device_bytes + 63) / 64 * 64;
    BALLAST_ASSIGN_OR_RETURN(out_.memory, HostArena::allocate(total), "holding this rank's shards");
    out_.shards.reserve(mine.weights.size());
    std::uint64_t at = 0;
    for (const WeightShard& s : mine.weights) {
      out_.shards.emplace_back(out_.memory.data() + at, s.device_bytes);
      at += (s.device_bytes + 63) / 64 * 64;
    }
    pieces_.reserve(world_);
    for (std::uint32_t q = 0; q < world_; ++q) pieces_.push_back(dist::pieces_of(plans_.ranks[q]));
    BALLAST_RETURN_IF_ERROR(copy_inline());

    // What each peer of its storage domain owes this rank: its part's bytes
    // of this rank's pieces (ranks of other domains read their own).
    expected_.assign(world_, 0);
    received_.assign(world_, 0);
    done_.assign(world_, false);
    for (std::uint32_t p = 0; p < world_; ++p) {
      if (p == rank_ || !same_domain(p)) continue;
      for (const ReadPlanFile& f : load_.reads[p].files()) {
        const auto file = pieces_[rank_].files.find(f.mapping);
        if (file == pieces_[rank_].files.end()) continue;
        for (const ReadRange& r : f.ranges) expected_[p] += dist::bytes_in(file->second, r.offset, r.offset + r.length);
      }
    }

    rounds_ = options_.exchange == ExchangeMode::rounds ||
              (options_.exchange == ExchangeMode::automatic && !comm_.any_source());
    if (!rounds_ && !comm_.any_source())
      return make_error(ErrorCode::invalid_argument, comm_.name() + " has no messages: trade in rounds");
    out_.report.rounds = rounds_;
    outgoing_.resize(world_);
    if (world_ > 1) BALLAST_RETURN_IF_ERROR(agree_on_mode());

    const ReadPlan& portion = load_.reads[rank_];
    if (!portion.empty()) {
      BALLAST_ASSIGN_OR_RETURN(out_.report.read, read_plan(model_.store(), portion, options_.read,
                                                           [&](const ReadChunk& c) { return deliver(c); }));
      out_.report.read_bytes = out_.report.read.bytes;
    }
    if (rounds_) {
      // Rounds until every rank has read everything and traded it.
      do BALLAST_RETURN_IF_ERROR(round(true));
      while (!all_done_);
      if (Status owed = owed_after_rounds(); !owed.ok()) return owed;
    } else {
      // This rank has read everything: it says so, then takes the rest of
      // its bytes until every peer has paid and said so too. A peer still
      // reading sends signs of life meanwhile, so the wait for it is
      // bounded by the timeout between messages, not by its whole read.
      const Header done{kDone, 0, 0, 0};
      const auto* w = reinterpret_cast<const std::byte*>(&done);
      for (std::uint32_t q = 0; q < world_; ++q)
        if (q != rank_)
          BALLAST_RETURN_IF_ERROR(comm_.send(q, std::vector<std::byte>(w, w + sizeof done)),
                                  "telling rank " + std::to_string(q) + " this rank has read its part");
      done_[rank_] = true;
      for (;;) {
        std::uint64_t owed = 0;
        bool everyone = true;
        for (std::uint32_t p = 0; p < world_; ++p) {
          owed += expected_[p] - received_[p];
          everyone = everyone && done_[p];
        }
        if (owed == 0 && everyone) break;
        BALLAST_ASSIGN_OR_RETURN(auto message, comm_.receive(Clock::now() + options_.timeout));
        if (!message) return owed_error();
        BALLAST_RETURN_IF_ERROR(accept(*message));
      }
    }
    // Every byte of this rank's shards came, once: a load plan made from
    // other shard plans leaves some uncovered, which must not pass as zeros.
    const std::uint64_t got = out_.report.kept_bytes + out_.report.received_bytes + out_.report.inline_bytes;
    if (got != plans_.ranks[rank_].totals.device_bytes)
      return make_error(ErrorCode::malformed, "this rank's shards got " + std::to_string(got) + " of their " +
                                                  std::to_string(plans_.ranks[rank_].totals.device_bytes) +
                                                  " bytes: is the load plan made from these shard plans "
                                                  "(plan_cooperative_load(model, plans))?");
    // Every rank holds its shards before any returns them: a failure
    // anywhere fails the load everywhere.
    BALLAST_RETURN_IF_ERROR(comm_.barrier(Clock::now() + options_.timeout));
    out_.report.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    return std::move(out_);
  }

 private:
  // Inline weights: from this rank's own model (offsets in the weight's bytes).
  Status copy_inline() {
    const ShardPlan& mine = plans_.ranks[rank_];
    for (std::uint32_t i : pieces_[rank_].inline_shards) {
      const WeightShard& s = mine.weights[i];
      const auto ref = model_.store().weights().find(s.id);
      const auto bytes = ref == model_.store().weights().end() ? std::nullopt : model_.store().bytes(ref->second);
      if (!bytes)
        return make_error(ErrorCode::not_found, "inline weight '" + s.weight + "' is not in this rank's model");
      std::byte* dst = out_.shards[i].data();
      std::uint64_t at = 0;
      auto take = [&](std::uint64_t offset, std::uint64_t length) -> Status {
        if (offset > bytes->size() || length > bytes->size() - offset || length > s.device_bytes - at)
          return make_error(ErrorCode::out_of_bounds, "inline weight '" + s.weight + "': its shard lies outside its " +
                                                          std::to_string(bytes->size()) + " bytes");
        std::memcpy(dst + at, bytes->data() + offset, length);
        at += length;
        return {};
      };
      for (const ByteRange& r : s.ranges) BALLAST_RETURN_IF_ERROR(take(r.offset, r.length));
      // A fused weight's parts lie side by side in each row of the shard
      // (strided_layout), as the file's pieces place them: part p's row i
      // at first + at[p] + i * stride[p], checked against the shard.
      const dist::StridedLayout layout = dist::strided_layout(s);
      const std::uint64_t first = at;
      for (std::size_t part = 0; part < s.strided.size(); ++part) {
        const StridedView& v = s.strided[part];
        for (std::uint64_t row = 0; row < v.rows; ++row) {
          const std::uint64_t from = v.offset + row * v.row_stride;
          const std::uint64_t to = first + layout.at[part] + row * layout.stride[part];
          if (from > bytes->size() || v.row_bytes > bytes->size() - from || to > s.device_bytes ||
              v.row_bytes > s.device_bytes - to)
            return make_error(ErrorCode::out_of_bounds, "inline weight '" + s.weight +
                                                            "': its shard lies outside its " +
                                                            std::to_string(bytes->size()) + " bytes");
          std::memcpy(dst + to, bytes->data() + from, v.row_bytes);
        }
        at += v.bytes();
      }
      out_.report.inline_bytes += at;
    }
    return {};
  }

  // One chunk of this rank's part: kept, and sent to every rank whose pieces it meets.
  Status deliver(const ReadChunk& c) {
    const std::uint64_t lo = c.offset, hi = c.offset + c.bytes.size();
    bool sent_any = false;
    for (std::uint32_t q = 0; q < world_; ++q) {
      if (!same_domain(q)) continue;
      const auto file = pieces_[q].files.find(c.mapping);
      if (file == pieces_[q].files.end()) continue;
      if (q == rank_) {
        dist::for_each_run(file->second, lo, hi, [&](const dist::Piece& p, std::uint64_t at, std::uint64_t n, std::uint64_t dest) {
          std::memcpy(out_.shards[p.shard].data() + dest, c.bytes.data() + (at - lo), n);
          out_.report.kept_bytes += n;
        });
        continue;
      }
      const std::uint64_t n = dist::bytes_in(file->second, lo, hi);
      if (n == 0) continue;
      // Built by appending, not sized first: a sized vector would be
      // zero-filled before the bytes overwrite it. In rounds, appended to
      // what this peer's next round carries.
      std::vector<std::byte> single;
      std::vector<std::byte>& message = rounds_ ? outgoing_[q] : single;
      // A round's buffer opens with its word (written when the round
      // starts), and grows geometrically: an exact reserve per message
      // would copy the whole buffer at every append.
      if (rounds_ && message.empty()) message.resize(sizeof(std::uint64_t));
      const std::uint64_t need = message.size() + sizeof(Header) + n;
      if (message.capacity() < need) message.reserve(std::max<std::uint64_t>(need, 2 * message.capacity()));
      const Header h{c.mapping, 0, lo, c.bytes.size()};
      const auto* header = reinterpret_cast<const std::byte*>(&h);
      message.insert(message.end(), header, header + sizeof h);
      dist::for_each_run(file->second, lo, hi, [&](const dist::Piece&, std::uint64_t at, std::uint64_t length, std::uint64_t) {
        const std::byte* from = c.bytes.data() + (at - lo);
        message.insert(message.end(), from, from + length);
      });
      if (!rounds_)
        BALLAST_RETURN_IF_ERROR(comm_.send(q, std::move(message)), "sending rank " + std::to_string(q) + " its bytes");
      out_.report.sent_bytes += n;
      ++out_.report.messages_sent;
      gathered_ += sizeof(Header) + n;
      sent_any = true;
    }
    // A rank reading a long stretch of its own shard sends nothing for a
    // while: its peers must still hear from it before their timeout, so
    // a round (or an empty message) goes out after a quarter of it.
    const bool quiet = Clock::now() - last_out_ > options_.timeout / 4;
    if (rounds_) return gathered_ >= options_.round_bytes || quiet ? round(false) : Status();
    if (sent_any) {
      last_out_ = Clock::now();
    } else if (quiet) {
      const Header alive{kKeepAlive, 0, 0, 0};
      const auto* w = reinterpret_cast<const std::byte*>(&alive);
      for (std::uint32_t q = 0; q < world_; ++q)
        if (q != rank_) BALLAST_RETURN_IF_ERROR(comm_.send(q, std::vector<std::byte>(w, w + sizeof alive)), "telling rank " + std::to_string(q) + " this rank is reading");
      last_out_ = Clock::now();
    }
    // Whatever has come meanwhile, without waiting.
    for (;;) {
      BALLAST_ASSIGN_OR_RETURN(auto message, comm_.receive(Clock::now()));
      if (!message) return {};
      BALLAST_RETURN_IF_ERROR(accept(*message));
    }
  }

  // Before any bytes go, the ranks agree on how they trade: one round in
  // which each tells every peer its mode, then a barrier, so that no
  // load message reaches a rank still in that round. Ranks given
  // different modes would otherwise never meet (a round waits for
  // buffers that go out as messages) and fail at their timeout with a
  // count of missing bytes; this way each fails at once, naming the
  // mismatch.
  Status agree_on_mode() {
    const std::uint64_t word = kHelloMagic | (rounds_ ? 1 : 0);
    const auto* w = reinterpret_cast<const std::byte*>(&word);
    std::vector<std::vector<std::byte>> to(world_);
    for (std::uint32_t q = 0; q < world_; ++q)
      if (q != rank_) to[q].assign(w, w + sizeof word);
    BALLAST_ASSIGN_OR_RETURN(auto from, comm_.exchange(std::move(to), Clock::now() + options_.timeout),
                             "agreeing with the other ranks on how to trade bytes");
    if (from.size() != world_)
      return make_error(ErrorCode::internal, comm_.name() + " exchange gave " + std::to_string(from.size()) +
                                                 " buffers in a world of " + std::to_string(world_));
    for (std::uint32_t p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      std::uint64_t theirs = 0;
      if (from[p].size() == sizeof theirs) std::memcpy(&theirs, from[p].data(), sizeof theirs);
      if ((theirs & ~std::uint64_t{1}) != kHelloMagic)
        return make_error(ErrorCode::malformed, std::to_string(from[p].size()) + " bytes from rank " + std::to_string(p) +
                                                    " are not a cooperative load's greeting");
      if (theirs != word)
        return make_error(ErrorCode::invalid_argument,
                          std::string("rank ") + std::to_string(p) + " trades in " + (rounds_ ? "messages" : "rounds") +
                              " and this rank in " + (rounds_ ? "rounds" : "messages") +
                              ": every rank must be given the same exchange mode (--exchange)");
    }
    return comm_.barrier(Clock::now() + options_.timeout);
  }

  // One round: this rank's gathered messages out, its peers' in.
  Status round(bool done) {
    std::vector<std::vector<std::byte>> to(world_);
    const std::uint64_t word = kRoundMagic | (done ? kRoundDone : 0);
    for (std::uint32_t q = 0; q < world_; ++q) {
      if (q == rank_) continue;
      // The gathered messages move into the round, behind their word: no copy.
      if (outgoing_[q].empty()) outgoing_[q].resize(sizeof word);
      std::memcpy(outgoing_[q].data(), &word, sizeof word);
      to[q] = std::move(outgoing_[q]);
      outgoing_[q] = {};
    }
    gathered_ = 0;
    ++out_.report.round_count;
    BALLAST_ASSIGN_OR_RETURN(auto from, comm_.exchange(std::move(to), Clock::now() + options_.timeout),
                             "round " + std::to_string(out_.report.round_count));
    last_out_ = Clock::now();
    if (from.size() != world_)
      return make_error(ErrorCode::internal, comm_.name() + " exchange gave " + std::to_string(from.size()) +
                                                 " buffers in a world of " + std::to_string(world_));
    bool everyone = done;
    for (std::uint32_t p = 0; p < world_; ++p) {
      if (p == rank_) continue;
      const std::vector<std::byte>& b = from[p];
      std::uint64_t w = 0;
      if (b.size() >= sizeof w) std::memcpy(&w, b.data(), sizeof w);
      if ((w & ~kRoundDone) != kRoundMagic)
        return make_error(ErrorCode::malformed, "round " + std::to_string(out_.report.round_count) + ": " +
                                                    std::to_string(b.size()) + " bytes from rank " + std::to_string(p) +
                                                    " are not a cooperative load's round");
      everyone = everyone && (w & kRoundDone) != 0;
      // Messages one after another: a header, then what this rank's pieces take of its stretch.
      std::uint64_t at = sizeof w;
      while (at < b.size()) {
        BALLAST_ASSIGN_OR_RETURN(const std::uint64_t used, accept(p, b.data() + at, b.size() - at, false));
        at += used;
        ++out_.report.messages_received;
      }
    }
    all_done_ = everyone;
    return {};
  }

  // After the last round every byte must have come: a peer that sent less
  // than this rank's plan takes has another plan.
  Status owed_after_rounds() const {
    const std::string who = owing(" bytes short");
    if (who.empty()) return {};
    return make_error(ErrorCode::malformed, "every rank has read everything, and " + who +
                                                " sent less than this rank's plan takes: do the ranks have the same model and plan?");
  }

  // A message from a peer: its payload placed by this rank's pieces.
  Status accept(const CommMessage& m) {
    Header h;
    if (m.bytes.size() == sizeof h && (std::memcpy(&h, m.bytes.data(), sizeof h), h.length == 0) &&
        (h.mapping == kKeepAlive || h.mapping == kDone)) {
      if (m.from >= world_ || m.from == rank_)
        return make_error(ErrorCode::malformed, "a message from rank " + std::to_string(m.from) + " in a world of " +
                                                    std::to_string(world_));
      if (h.mapping == kDone) done_[m.from] = true;
      return {};  // a peer still reading, or done
    }
    BALLAST_ASSIGN_OR_RETURN(const std::uint64_t used, accept(m.from, m.bytes.data(), m.bytes.size(), true));
    (void)used;
    ++out_.report.messages_received;
    return {};
  }

  // One message at `bytes` from rank `sender`: a header and the payload it
  // implies. `whole`: the message is all of `size` (messages), else it is
  // followed by others (a round). Returns the bytes it took.
  Result<std::uint64_t> accept(std::uint32_t sender, const std::byte* bytes, std::uint64_t size, bool whole) {
    const std::string from = "rank " + std::to_string(sender);
    Header h;
    if (sender >= world_ || sender == rank_ || size < sizeof h)
      return make_error(ErrorCode::malformed, "a message of " + std::to_string(size) + " bytes from " + from +
                                                  " is not a cooperative load's");
    std::memcpy(&h, bytes, sizeof h);
    const auto file = pieces_[rank_].files.find(h.mapping);
    const std::uint64_t takes = file == pieces_[rank_].files.end() || h.length > UINT64_MAX - h.offset
                                    ? 0
                                    : dist::bytes_in(file->second, h.offset, h.offset + h.length);
    const std::uint64_t payload = whole ? size - sizeof h : std::min(takes, size - sizeof h);
    if (takes != payload || payload == 0 || payload > expected_[sender] - received_[sender])
      return make_error(ErrorCode::malformed,
                        from + " sent " + std::to_string(payload) + " bytes of this rank's " + file_name(h.mapping) +
                            " [" + std::to_string(h.offset) + ", +" + std::to_string(h.length) + "), where this rank's plan takes " +
                            std::to_string(takes) + " (and " + std::to_string(expected_[sender] - received_[sender]) +
                            " more from it in all): do the ranks have the same model and plan?");
    const std::byte* at_payload = bytes + sizeof h;
    dist::for_each_run(file->second, h.offset, h.offset + h.length, [&](const dist::Piece& p, std::uint64_t, std::uint64_t n, std::uint64_t dest) {
      std::memcpy(out_.shards[p.shard].data() + dest, at_payload, n);
      at_payload += n;
    });
    received_[sender] += payload;
    out_.report.received_bytes += payload;
    return sizeof h + payload;
  }

  bool same_domain(std::uint32_t q) const { return load_.ranks[q].domain == load_.ranks[rank_].domain; }

  // A mapping as a person reads it: its path, or its number when the store has none of that number.
  std::string file_name(std::uint32_t mapping) const {
    const auto path = model_.store().mapping_path(mapping);
    return path ? "'" + path->string() + "'" : "file " + std::to_string(mapping);
  }

  // "rank 1 (96 bytes<unit>), rank 3 (...)": the peers that still owe this rank bytes.
  std::string owing(const char* unit) const {
    std::string who;
    for (std::uint32_t p = 0; p < world_; ++p)
      if (received_[p] < expected_[p])
        who += (who.empty() ? "rank " : ", rank ") + std::to_string(p) + " (" +
               std::to_string(expected_[p] - received_[p]) + " bytes" + unit + ")";
    return who;
  }

  Status owed_error() const {
    const std::string who = owing("");
    std::string reading;
    for (std::uint32_t p = 0; p < world_; ++p)
      if (!done_[p] && received_[p] >= expected_[p]) reading += (reading.empty() ? "" : ", ") + std::to_string(p);
    std::string message = "nothing came for " + std::to_string(options_.timeout.count()) + " ms from ";
    if (!who.empty()) message += "the ranks that still owe this rank bytes: " + who;
    if (!reading.empty()) message += (who.empty() ? "" : ", nor from ") + std::string("rank(s) ") + reading + " still reading";
    return make_error(ErrorCode::unavailable, message);
  }

  const Model& model_;
  const ShardPlans& plans_;
  const CooperativeLoadPlan& load_;
  Communicator& comm_;
  const CooperativeLoadOptions& options_;
  const std::uint32_t rank_, world_;
  std::vector<dist::RankPieces> pieces_;
  std::vector<std::uint64_t> expected_, received_;
  std::vector<bool> done_;  // messages: the ranks that said they read everything
  // Rounds: what each peer's next round carries, its bytes, and whether
  // the last round found every rank done.
  bool rounds_ = false;
  std::vector<std::vector<std::byte>> outgoing_;
  std::uint64_t gathered_ = 0;
  bool all_done_ = false;
  Clock::time_point last_out_ = Clock::now();  // this rank's last message or round
  RankShards out_;
};

}  // namespace

Result<RankShards> cooperative_load(const Model& model, const ShardPlans& plans, const CooperativeLoadPlan& load,
                                    Communicator& comm, const CooperativeLoadOptions& options) {
  const std::string context = "cooperative load on " + comm.name() + " rank " + std::to_string(comm.rank()) + " of " +
                              std::to_string(comm.world());
  if (comm.world() != plans.ranks.size() || comm.world() != load.world || load.reads.size() != load.world ||
      load.ranks.size() != load.world || comm.rank() >= comm.world()) {
    Status bad = make_error(ErrorCode::invalid_argument,
                            "the communicator's world (" + std::to_string(comm.world()) + ") is not the plans' (" +
                                std::to_string(plans.ranks.size()) + " shard plans, a load plan for " +
                                std::to_string(load.world) + ")");
    comm.fail(bad);
    return std::move(bad).with_context(context);
  }
  // An engine's own communicator may throw, and so may an allocation: the
  // peers must hear of it now (not at their timeout), and the caller gets
  // an error like any other, not an exception from inside the load.
  Result<RankShards> result = make_error(ErrorCode::internal, "the load did not run");
  try {
    result = Load(model, plans, load, comm, options).run();
  } catch (const std::bad_alloc&) {
    result = make_error(ErrorCode::out_of_memory, "host memory ran out during the load");
  } catch (const std::exception& e) {
    result = make_error(ErrorCode::internal, std::string("an exception during the load: ") + e.what());
  } catch (...) {
    result = make_error(ErrorCode::internal, "an exception of unknown type during the load");
  }
  if (!result.ok()) {
    comm.fail(result.status());
    return std::move(result.status()).with_context(context);
  }
  return result;
}

}  // namespace ballast
