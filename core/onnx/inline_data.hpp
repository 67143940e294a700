// Gathering the values of one repeated field of a message into the raw
// little-endian bytes of a tensor: borrowed when the field is a single
// packed fixed-width run (already the right bytes), owned otherwise.
#pragma once

#include "onnx/wire_reader.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace ballast::onnx {

struct InlineData {
  Bytes bytes;
  std::shared_ptr<const std::vector<std::byte>> owned;  // null when borrowed
  std::uint64_t count = 0;                              // values gathered
};

// Field `number` of `message` holds fixed-width values of `width` bytes
// (4 or 8), packed or not. Borrowed when exactly one packed run is present.
Result<InlineData> gather_fixed(const WireField& message, std::uint32_t number, std::size_t width,
                                std::string_view what);

// Number of varint values field `number` of `message` holds (packed or not).
Result<std::uint64_t> count_varints(const WireField& message, std::uint32_t number, std::string_view what);

// How the varints of a field are read (onnx.proto's field types), for the
// check that each value fits the `out_width` bytes it becomes.
enum class VarintField {
  unchecked,        // every value kept as its low bytes (Constant value_ints: 8 bytes anyway)
  signed_values,    // int32_data, int64_data: sign-extended two's complement
  unsigned_values,  // uint64_data
  bit_patterns,     // int32_data of a float type (float16, bfloat16, float8, float4): its bits, never negative
};

// Field `number` of `message` holds varints: each becomes `out_width` bytes
// little-endian (its low bytes), or one 0/1 byte when `as_bool`. The caller
// has checked the count with count_varints. A value that does not fit in
// `out_width` bytes, read as `field` says (signed fields admit both the
// signed and the unsigned range of the width: writers store bit patterns),
// is malformed: dropping its high bits silently would change the weight.
// A float type's bits admit only the unsigned range: -1 is no float16, and
// reading it as 0xffff (a NaN) would turn a writer's bug into a weight.
Result<InlineData> gather_varints(const WireField& message, std::uint32_t number, std::uint64_t count,
                                  std::size_t out_width, bool as_bool, std::string_view what,
                                  VarintField field = VarintField::unchecked);

}  // namespace ballast::onnx
