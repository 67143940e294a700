// share_row_maxima: the whole rows' maxima of each row-parallel quant_int8
// of a rank's shards, all-reduced by max over the ranks in one exchange
// round (cooperative_load.hpp).
//
// A maximum is taken on magnitudes as integers (the f32 or f16 bits with
// the sign cleared, NaNs left out): for non-NaN values the integer order
// is the float order, and an f16 magnitude widens to f32 exactly, so this
// is the kernels' max (kmath::abs_max_step) to the bit, and the max of the
// ranks' maxima is the whole row's. The round's buffer: a header (magic,
// how many derivations, how many maxima), then the maxima as f32, in the
// cut's order; a peer's of another count has another plan.
#include <ballast/cooperative_load.hpp>

#include "dist/check_shards.hpp"

#include <cstring>

namespace ballast {

namespace {

constexpr std::uint64_t kMaximaMagic = 0x62616c6c6d000000ull;  // "ballm" in the high bytes

struct Header {
  std::uint64_t magic = kMaximaMagic;
  std::uint64_t derivations = 0;
  std::uint64_t maxima = 0;
};
static_assert(sizeof(Header) == 24);

// |x| of an f32 or f16 element as f32 bits; 0 for a NaN.
std::uint32_t magnitude_bits(const std::byte* at, bool f16) {
  if (f16) {
    std::uint16_t h;
    std::memcpy(&h, at, 2);
    const std::uint32_t a = h & 0x7fffu;
    if (a > 0x7c00u) return 0;                 // NaN
    if (a == 0x7c00u) return 0x7f800000u;      // inf
    if (a >= 0x0400u) return (a + ((127u - 15u) << 10)) << 13;  // normal: rebias the exponent
    // Subnormal: a * 2^-24, a normal f32 (both factors exact, so is the product).
    const float v = static_cast<float>(a) * 0x1p-24f;
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return bits;
  }
  std::uint32_t bits;
  std::memcpy(&bits, at, 4);
  const std::uint32_t a = bits & 0x7fffffffu;
  return a > 0x7f800000u ? 0 : a;
}

float f32_of_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

Status share_row_maxima(const Model& model, const ShardPlan& rank, RankShards& shards,
                        std::span<const PlannedDerivation> plan, Communicator& comm, std::chrono::milliseconds timeout) {
  const std::string context = "sharing the rows' maxima of row-parallel quant_int8 (" + comm.name() + " rank " +
                              std::to_string(comm.rank()) + " of " + std::to_string(comm.world()) + ")";
  // A failure here fails the peers' round too, at once, not at their timeout.
  const auto failed = [&](Status s) {
    Status out = std::move(s).with_context(context);
    comm.fail(out);
    return out;
  };
  shards.row_maxima.clear();
  if (plan.empty()) return {};
  if (Status s = dist::check_shards(model, rank, shards); !s.ok()) return failed(s);
  auto cut = plan_shard_derivations(model, rank, plan);
  if (!cut.ok()) return failed(cut.status());
  std::vector<RowMaxima> mine;
  std::uint64_t total = 0;
  for (const ShardDerivation& d : *cut) {
    if (!d.launch || d.launch->kind != Derivation::quant_int8_given_max) continue;
    const DerivationLaunch& l = *d.launch;
    if (d.source >= shards.shards.size())
      return failed(make_error(ErrorCode::invalid_argument, "the shard set has no shard " + std::to_string(d.source) +
                                                                " (of '" + plan[d.planned].weight + "')"));
    const bool f16 = l.src_type == DataType::float16;
    const std::uint64_t element = f16 ? 2 : 4;
    const std::span<const std::byte> held = shards.shards[d.source];
    if (held.size() != l.rows * l.cols * element)
      return failed(make_error(ErrorCode::size_mismatch,
                               "the shard of '" + plan[d.planned].weight + "' holds " + std::to_string(held.size()) +
                                   " bytes, not the " + std::to_string(l.rows * l.cols * element) + " of its [" +
                                   std::to_string(l.rows) + ", " + std::to_string(l.cols) + "] part"));
    // Row n's part: n * cols + k as stored; of a MatMul B [K, N] (its
    // transpose quantized), k * N + n. Either way the bytes are walked in
    // storage order (a column walk of B would miss the cache at every
    // element of a weight of many MiB).
    std::vector<std::uint32_t> top(l.rows, 0);
    const std::uint64_t outer = d.of_transposed ? l.cols : l.rows, inner = d.of_transposed ? l.rows : l.cols;
    // An in-place shard is read from its file's mapping through the store.
    const Status read = dist::read_shard(model, rank, shards, d.source, [&](Bytes bytes) -> Status {
      const std::byte* at = bytes.data();
      for (std::uint64_t o = 0; o < outer; ++o)
        for (std::uint64_t j = 0; j < inner; ++j, at += element) {
          std::uint32_t& m = top[d.of_transposed ? j : o];
          const std::uint32_t a = magnitude_bits(at, f16);
          if (a > m) m = a;
        }
      return {};
    });
    if (!read.ok()) return failed(read);
    RowMaxima r;
    r.planned = d.planned;
    r.maxima.reserve(l.rows);
    for (std::uint32_t bits : top) r.maxima.push_back(f32_of_bits(bits));
    total += l.rows;
    mine.push_back(std::move(r));
  }
  if (mine.empty()) return {};
  if (comm.world() > 1) {
    const Header h{kMaximaMagic, mine.size(), total};
    std::vector<std::byte> buffer(sizeof h + 4 * total);
    std::memcpy(buffer.data(), &h, sizeof h);
    std::uint64_t at = sizeof h;
    for (const RowMaxima& r : mine) {
      std::memcpy(buffer.data() + at, r.maxima.data(), 4 * r.maxima.size());
      at += 4 * r.maxima.size();
    }
    std::vector<std::vector<std::byte>> to(comm.world());
    for (std::uint32_t q = 0; q < comm.world(); ++q)
      if (q != comm.rank()) to[q] = buffer;
    auto from = comm.exchange(std::move(to), std::chrono::steady_clock::now() + timeout);
    if (!from.ok()) return failed(from.status());
    if (from->size() != comm.world())
      return failed(make_error(ErrorCode::internal, comm.name() + " exchange gave " + std::to_string(from->size()) +
                                                        " buffers in a world of " + std::to_string(comm.world())));
    for (std::uint32_t p = 0; p < comm.world(); ++p) {
      if (p == comm.rank()) continue;
      const std::vector<std::byte>& b = (*from)[p];
      Header theirs{0, 0, 0};
      if (b.size() >= sizeof theirs) std::memcpy(&theirs, b.data(), sizeof theirs);
      if (theirs.magic != kMaximaMagic || theirs.derivations != h.derivations || theirs.maxima != total ||
          b.size() != sizeof h + 4 * total)
        return failed(make_error(ErrorCode::malformed,
                                 std::to_string(b.size()) + " bytes from rank " + std::to_string(p) +
                                     " are not the maxima of this rank's " + std::to_string(mine.size()) +
                                     " row-parallel quant_int8 (" + std::to_string(total) +
                                     " rows): do the ranks have the same model and plan?"));
      std::uint64_t off = sizeof h;
      for (RowMaxima& r : mine)
        for (float& m : r.maxima) {
          float t;
          std::memcpy(&t, b.data() + off, 4);
          off += 4;
          if (t > m) m = t;  // a NaN never is
        }
    }
  }
  shards.row_maxima = std::move(mine);
  return {};
}

}  // namespace ballast
