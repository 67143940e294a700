// A zero-copy reader of the protobuf wire format over bytes that stay where
// they are (usually a memory-mapped .onnx file). It knows nothing of ONNX:
// it yields one field at a time and refuses anything the format forbids,
// naming the absolute byte offset where the input went wrong.
#pragma once

#include <ballast/status.hpp>
#include <ballast/weight_store.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ballast::onnx {

enum class WireType : std::uint8_t {
  varint = 0,
  fixed64 = 1,
  len = 2,  // length-delimited: strings, bytes, messages, packed repeated fields
  start_group = 3,
  end_group = 4,
  fixed32 = 5,
};

std::string_view wire_type_name(WireType t) noexcept;

struct WireField {
  std::uint32_t number = 0;
  WireType type = WireType::varint;
  std::uint64_t value = 0;  // varint, fixed32 and fixed64 fields
  Bytes payload;            // len fields: the bytes; fixed fields: their 4 or 8 bytes
  std::uint64_t offset = 0;          // absolute offset of the tag
  std::uint64_t payload_offset = 0;  // absolute offset of the value or payload

  std::string_view text() const noexcept {
    return {reinterpret_cast<const char*>(payload.data()), payload.size()};
  }
};

// A malformed-input error at an absolute byte offset.
Error wire_error(std::string message, std::uint64_t offset);

// Decodes one varint at bytes[pos], advancing pos. At most 10 bytes; the
// tenth may only carry bit 63. Returns false (pos unchanged) on truncated,
// overlong or overflowing input.
bool read_varint_slow(Bytes bytes, std::size_t& pos, std::uint64_t& value) noexcept;
inline bool read_varint(Bytes bytes, std::size_t& pos, std::uint64_t& value) noexcept {
  // Tags and most lengths are one byte: keep that case out of the loop.
  if (pos < bytes.size()) [[likely]] {
    const auto b = std::to_integer<std::uint8_t>(bytes[pos]);
    if (b < 0x80) {
      value = b;
      ++pos;
      return true;
    }
  }
  return read_varint_slow(bytes, pos, value);
}

class WireReader {
 public:
  // `message` starts at absolute offset `base_offset` of the input.
  WireReader(Bytes message, std::uint64_t base_offset) noexcept : bytes_(message), base_(base_offset) {}

  bool at_end() const noexcept { return pos_ >= bytes_.size(); }

  // Reads the next field into `field`. False when the bytes are not valid
  // wire format; error() then says why and where, and the reader stops.
  // This is the hot loop of the loader: no Result/Status per field.
  bool next(WireField& field);
  Error error() const;

  // The same, as a Result (convenient where speed does not matter).
  Result<WireField> next();

 private:
  bool fail(const char* what, std::uint64_t offset, std::uint32_t number = 0, std::uint64_t a = 0, std::uint64_t b = 0);

  Bytes bytes_;
  std::uint64_t base_;
  std::size_t pos_ = 0;
  // Why next() failed, kept as plain values until someone asks.
  const char* error_what_ = nullptr;
  std::uint64_t error_offset_ = 0;
  std::uint32_t error_number_ = 0;
  std::uint64_t error_a_ = 0, error_b_ = 0;
};

Error wire_type_error(const WireField& field, WireType expected, std::string_view what);

namespace detail {
inline constexpr std::uint32_t kMaxFieldNumber = (1u << 29) - 1;
inline std::uint64_t load_le(const std::byte* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}
}  // namespace detail

// Inline: the loader's hot loop runs through here once per field.
[[gnu::always_inline]] inline bool WireReader::next(WireField& f) {
  f.offset = base_ + pos_;
  std::uint64_t tag = 0;
  if (!read_varint(bytes_, pos_, tag)) return fail("truncated or overlong field tag", f.offset);
  if (tag > 0xffffffffu) return fail("field tag does not fit in 32 bits", f.offset);
  const auto number = static_cast<std::uint32_t>(tag >> 3);
  const auto raw_type = static_cast<unsigned>(tag & 7u);
  if (number == 0 || number > detail::kMaxFieldNumber) return fail("invalid field number", f.offset, number);
  f.number = number;
  const std::size_t value_pos = pos_;
  f.payload_offset = base_ + pos_;
  // Length-delimited and varint fields are nearly all of an ONNX file: test
  // for them first with plain branches (a jump table costs a hard-to-predict
  // indirect branch per field).
  if (raw_type == 2) [[likely]] {
    f.type = WireType::len;
    std::uint64_t length = 0;
    if (!read_varint(bytes_, pos_, length)) [[unlikely]]
      return fail("truncated or overlong length", f.payload_offset, number);
    const std::uint64_t left = bytes_.size() - pos_;
    if (length > left) [[unlikely]]
      return fail("claims more bytes than remain in field", f.payload_offset, number, length, left);
    f.payload_offset = base_ + pos_;
    f.payload = bytes_.subspan(pos_, static_cast<std::size_t>(length));
    pos_ += static_cast<std::size_t>(length);
    return true;
  }
  if (raw_type == 0) {
    f.type = WireType::varint;
    if (!read_varint(bytes_, pos_, f.value)) [[unlikely]]
      return fail("truncated, overlong or overflowing varint", f.payload_offset, number);
    f.payload = bytes_.subspan(value_pos, pos_ - value_pos);
    return true;
  }
  if (raw_type == 1 || raw_type == 5) {
    f.type = raw_type == 1 ? WireType::fixed64 : WireType::fixed32;
    const std::size_t width = raw_type == 1 ? 8 : 4;
    if (bytes_.size() - pos_ < width)
      return fail(raw_type == 1 ? "truncated fixed64" : "truncated fixed32", f.payload_offset, number);
    f.payload = bytes_.subspan(pos_, width);
    f.value = detail::load_le(f.payload.data(), width);
    pos_ += width;
    return true;
  }
  if (raw_type == 3 || raw_type == 4) return fail("protobuf groups are not supported", f.offset, number);
  return fail("invalid wire type", f.offset, number, raw_type);
}


// `field` must have wire type `expected`; otherwise a malformed error
// naming `what` (e.g. "TensorProto.name") and the field's offset.
inline Status expect_wire_type(const WireField& field, WireType expected, std::string_view what) {
  if (field.type == expected) [[likely]]
    return {};
  return wire_type_error(field, expected, what);
}

// Number of varints in a packed repeated field's payload, or a malformed
// error when the payload does not consist of whole varints.
Result<std::uint64_t> count_packed_varints(const WireField& field, std::string_view what);

}  // namespace ballast::onnx
