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
bool read_varint(Bytes bytes, std::size_t& pos, std::uint64_t& value) noexcept;

class WireReader {
 public:
  // `message` starts at absolute offset `base_offset` of the input.
  WireReader(Bytes message, std::uint64_t base_offset) noexcept : bytes_(message), base_(base_offset) {}

  bool at_end() const noexcept { return pos_ >= bytes_.size(); }
  // The next field; a malformed error when the bytes are not valid wire
  // format (the reader must not be used after an error).
  Result<WireField> next();

 private:
  Bytes bytes_;
  std::uint64_t base_;
  std::size_t pos_ = 0;
};

// `field` must have wire type `expected`; otherwise a malformed error
// naming `what` (e.g. "TensorProto.name") and the field's offset.
Status expect_wire_type(const WireField& field, WireType expected, std::string_view what);

// Number of varints in a packed repeated field's payload, or a malformed
// error when the payload does not consist of whole varints.
Result<std::uint64_t> count_packed_varints(const WireField& field, std::string_view what);

}  // namespace ballast::onnx
