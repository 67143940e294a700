// shards_in_place: a rank's shards taken from the model it opened, no load
// (cooperative_load.hpp). One-range shards are the mapping's own bytes;
// the others are gathered into one HostArena, each piece read through the
// store (copy_bytes, transfer), so a file cut under its mapping is an io
// error naming it.
#include <ballast/cooperative_load.hpp>

#include "dist/check_shards.hpp"
#include "dist/pieces.hpp"
#include "shard/shard_source.hpp"

#include <chrono>
#include <cstring>

namespace ballast {

namespace {

constexpr std::uint64_t kShardAlignment = 64;  // as cooperative_load places them

// Gathers a shard in several pieces (a fused weight's ranges, a strided
// view's rows) into `dst`, its device_bytes long.
Status gather(const WeightStore& store, const WeightRef& w, std::uint64_t base, const WeightShard& s,
              std::span<std::byte> dst) {
  std::uint64_t at = 0;
  for (const ByteRange& r : s.ranges) {
    if (r.offset < base || r.length > dst.size() - at)
      return make_error(ErrorCode::out_of_bounds, "a range of the plan lies outside the weight or its shard");
    BALLAST_RETURN_IF_ERROR(store.copy_bytes(w, r.offset - base, dst.subspan(at, r.length)));
    at += r.length;
  }
  // A fused weight's parts lie side by side in each row (strided_layout),
  // so every part must fit before the first is placed.
  const dist::StridedLayout layout = dist::strided_layout(s);
  const std::uint64_t first = at;
  std::uint64_t views = 0;
  for (const StridedView& v : s.strided)
    if (v.row_bytes > v.row_stride || v.bytes() > dst.size() - at - views)
      return make_error(ErrorCode::out_of_bounds, "a view of the plan lies outside the weight or its shard");
    else
      views += v.bytes();
  for (std::size_t part = 0; part < s.strided.size(); ++part) {
    const StridedView& v = s.strided[part];
    if (v.rows == 0) continue;
    if (v.offset < base)
      return make_error(ErrorCode::out_of_bounds, "a view of the plan lies outside the weight or its shard");
    // One transfer over the rows' span: one check of the file, one armed
    // range, and only the rows' own bytes copied. (A public ShardPlan may
    // be built by hand: the span's arithmetic is checked.)
    if (v.row_stride != 0 && v.rows - 1 > (UINT64_MAX - v.row_bytes) / v.row_stride)
      return make_error(ErrorCode::overflow, "a view of " + std::to_string(v.rows) + " rows " +
                                                 std::to_string(v.row_stride) + " bytes apart");
    const std::uint64_t span = (v.rows - 1) * v.row_stride + v.row_bytes;
    std::byte* out = dst.data() + first + layout.at[part];
    BALLAST_RETURN_IF_ERROR(store.transfer(w, v.offset - base, span, [&](Bytes in) -> Status {
      for (std::uint64_t row = 0; row < v.rows; ++row)
        std::memcpy(out + row * layout.stride[part], in.data() + row * v.row_stride, v.row_bytes);
      return {};
    }));
    at += v.bytes();
  }
  if (at != dst.size())
    return make_error(ErrorCode::size_mismatch, "the plan's pieces hold " + std::to_string(at) + " bytes, its shard " +
                                                    std::to_string(dst.size()));
  return {};
}

}  // namespace

Result<RankShards> shards_in_place(const Model& whole, const ShardPlan& rank) {
  const auto start = std::chrono::steady_clock::now();
  const std::string context =
      "taking rank " + std::to_string(rank.rank) + " of " + std::to_string(rank.world) + "'s shards in place";
  RankShards out;
  out.report.rank = rank.rank;
  const std::size_t n = rank.weights.size();
  out.shards.resize(n);
  out.in_place.assign(n, false);
  std::uint64_t gathered = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const WeightShard& s = rank.weights[i];
    if (s.device_bytes == 0) continue;
    if (s.contiguous() && s.ranges.size() == 1) {
      out.in_place[i] = true;
      continue;
    }
    if (s.device_bytes > UINT64_MAX - gathered - kShardAlignment)
      return make_error(ErrorCode::overflow, "the gathered shards' bytes").with_context(context);
    gathered += (s.device_bytes + kShardAlignment - 1) / kShardAlignment * kShardAlignment;
  }
  BALLAST_ASSIGN_OR_RETURN(out.memory, HostArena::allocate(gathered), context + ": holding the gathered shards");
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const WeightShard& s = rank.weights[i];
    if (s.device_bytes == 0) continue;
    const std::string what = context + ": the shard of '" + s.weight + "'";
    if (out.in_place[i]) {
      BALLAST_ASSIGN_OR_RETURN(const dist::InPlaceRange r, dist::in_place_range(whole, s), context);
      if (r.length != s.device_bytes)
        return make_error(ErrorCode::size_mismatch, "its range holds " + std::to_string(r.length) +
                                                        " bytes, its plan " + std::to_string(s.device_bytes))
            .with_context(what);
      const auto bytes = whole.store().bytes(*r.weight);
      if (!bytes) return make_error(ErrorCode::not_found, "the weight's bytes are not mapped").with_context(what);
      // The mapping is read-only: the span is writable only by its type
      // (RankShards holds cooperative_load's arrays too); nothing writes it.
      out.shards[i] = std::span<std::byte>(const_cast<std::byte*>(bytes->data() + r.offset), r.length);
      out.report.kept_bytes += r.length;
      continue;
    }
    BALLAST_ASSIGN_OR_RETURN(const shard::ShardSource source, shard::shard_source(whole, s), what);
    const std::span<std::byte> dst(out.memory.data() + at, s.device_bytes);
    BALLAST_RETURN_IF_ERROR(gather(whole.store(), *source.weight, source.base, s, dst), what);
    out.shards[i] = dst;
    out.report.read_bytes += s.device_bytes;
    at += (s.device_bytes + kShardAlignment - 1) / kShardAlignment * kShardAlignment;
  }
  out.report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace ballast
