// gather_launch: the slice launch that gathers one part of a strided shard
// on a device from its whole weight there (shard.hpp).
#include "shard/shard_source.hpp"

#include <algorithm>
#include <string>

namespace ballast {

namespace {

// The widest element (8, 4, 2 or 1 bytes) that divides every byte count
// of the run and the source's device address (backends that read whole
// elements need them aligned), so the launch moves whole elements of it.
DataType widest_element(std::uint64_t run, std::uint64_t stride, std::uint64_t first, DevicePtr src) {
  const std::uint64_t all = run | stride | first | src;
  if (all % 8 == 0) return DataType::uint64;
  if (all % 4 == 0) return DataType::uint32;
  if (all % 2 == 0) return DataType::uint16;
  return DataType::uint8;
}

}  // namespace

Result<DerivationLaunch> gather_launch(const Model& model, const WeightShard& shard, std::size_t part, DevicePtr weight) {
  const auto fail = [&](ErrorCode code, std::string why) {
    return make_error(code, std::move(why)).with_context("gathering the shard of '" + shard.weight + "'");
  };
  if (part >= shard.strided.size())
    return fail(ErrorCode::invalid_argument, "part " + std::to_string(part) + " of a shard with " +
                                                 std::to_string(shard.strided.size()) + " strided parts");
  // A fused weight's parts lie side by side in each of the shard's rows;
  // a slice writes dense rows of one part, so it cannot place them.
  if (shard.strided.size() > 1)
    return fail(ErrorCode::unsupported,
                "its " + std::to_string(shard.strided.size()) +
                    " fused parts interleave in each row of the shard, which one slice per "
                    "part cannot write; gather it on the host (cooperative_load, shards_in_place)");
  const auto source = shard::shard_source(model, shard);
  if (!source) return Error(source.error()).with_context("gathering the shard of '" + shard.weight + "'");
  const WeightRef& w = *source->weight;
  const std::uint64_t base = source->base;
  const StridedView& v = shard.strided[part];
  const std::uint64_t length = w.byte_length();
  if (v.row_stride == 0 || v.row_bytes > v.row_stride || v.offset < base)
    return fail(ErrorCode::invalid_argument, "the view is not rows of the weight");
  const std::uint64_t at = v.offset - base;
  const std::uint64_t first = at % v.row_stride;  // the run's first byte in its row
  const std::uint64_t start = at - first;         // the first source row's first byte
  if (first + v.row_bytes > v.row_stride || v.rows > (length - std::min(length, start)) / v.row_stride)
    return fail(ErrorCode::out_of_bounds, std::to_string(v.rows) + " rows of " + std::to_string(v.row_stride) +
                                              " bytes from byte " + std::to_string(start) + " pass the weight's " +
                                              std::to_string(length) + " bytes");
  DerivationLaunch l;
  l.kind = Derivation::slice;
  l.src_type = widest_element(v.row_bytes, v.row_stride, first, weight + start);
  const std::uint64_t e = dtype_bits(l.src_type) / 8;
  l.rows = v.rows;
  l.cols = v.row_bytes / e;
  l.src_cols = v.row_stride / e;
  l.col_offset = first / e;
  l.src = weight + start;
  return l;
}

}  // namespace ballast
