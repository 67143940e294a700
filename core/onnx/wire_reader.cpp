#include "onnx/wire_reader.hpp"

#include <cstring>

namespace ballast::onnx {

namespace {
constexpr std::size_t kMaxVarintBytes = 10;
constexpr std::uint32_t kMaxFieldNumber = (1u << 29) - 1;

std::uint64_t load_le(const std::byte* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{std::to_integer<std::uint8_t>(p[i])} << (8 * i);
  return v;
}
}  // namespace

std::string_view wire_type_name(WireType t) noexcept {
  switch (t) {
    case WireType::varint: return "varint";
    case WireType::fixed64: return "fixed64";
    case WireType::len: return "length-delimited";
    case WireType::start_group: return "start-group";
    case WireType::end_group: return "end-group";
    case WireType::fixed32: return "fixed32";
  }
  return "invalid";
}

Error wire_error(std::string message, std::uint64_t offset) {
  Error e = make_error(ErrorCode::malformed, std::move(message));
  e.offset = offset;
  return e;
}

bool read_varint(Bytes bytes, std::size_t& pos, std::uint64_t& value) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < kMaxVarintBytes; ++i) {
    if (pos + i >= bytes.size()) return false;
    const auto b = std::to_integer<std::uint8_t>(bytes[pos + i]);
    if (i == kMaxVarintBytes - 1 && b > 1) return false;  // would not fit in 64 bits
    v |= std::uint64_t{b & 0x7fu} << (7 * i);
    if ((b & 0x80u) == 0) {
      pos += i + 1;
      value = v;
      return true;
    }
  }
  return false;
}

Result<WireField> WireReader::next() {
  WireField f;
  f.offset = base_ + pos_;
  const std::size_t tag_pos = pos_;
  std::uint64_t tag = 0;
  if (!read_varint(bytes_, pos_, tag)) return wire_error("truncated or overlong field tag", f.offset);
  if (tag > 0xffffffffu) return wire_error("field tag does not fit in 32 bits", f.offset);
  const auto number = static_cast<std::uint32_t>(tag >> 3);
  const auto raw_type = static_cast<unsigned>(tag & 7u);
  if (number == 0 || number > kMaxFieldNumber) {
    pos_ = tag_pos;
    return wire_error("invalid field number " + std::to_string(number), f.offset);
  }
  f.number = number;
  const std::size_t value_pos = pos_;
  f.payload_offset = base_ + pos_;
  switch (raw_type) {
    case 0:
      f.type = WireType::varint;
      if (!read_varint(bytes_, pos_, f.value))
        return wire_error("truncated, overlong or overflowing varint in field " + std::to_string(number),
                          f.payload_offset);
      f.payload = bytes_.subspan(value_pos, pos_ - value_pos);
      return f;
    case 1:
    case 5: {
      f.type = raw_type == 1 ? WireType::fixed64 : WireType::fixed32;
      const std::size_t width = raw_type == 1 ? 8 : 4;
      if (bytes_.size() - pos_ < width)
        return wire_error("truncated " + std::string(wire_type_name(f.type)) + " in field " + std::to_string(number),
                          f.payload_offset);
      f.payload = bytes_.subspan(pos_, width);
      f.value = load_le(f.payload.data(), width);
      pos_ += width;
      return f;
    }
    case 2: {
      f.type = WireType::len;
      std::uint64_t length = 0;
      if (!read_varint(bytes_, pos_, length))
        return wire_error("truncated or overlong length of field " + std::to_string(number), f.payload_offset);
      const std::uint64_t left = bytes_.size() - pos_;
      if (length > left)
        return wire_error("field " + std::to_string(number) + " claims " + std::to_string(length) + " bytes but only " +
                              std::to_string(left) + " remain",
                          f.payload_offset);
      f.payload_offset = base_ + pos_;
      f.payload = bytes_.subspan(pos_, static_cast<std::size_t>(length));
      pos_ += static_cast<std::size_t>(length);
      return f;
    }
    case 3:
    case 4: return wire_error("protobuf groups are not supported (field " + std::to_string(number) + ")", f.offset);
    default:
      return wire_error("invalid wire type " + std::to_string(raw_type) + " in field " + std::to_string(number),
                        f.offset);
  }
}

Status expect_wire_type(const WireField& field, WireType expected, std::string_view what) {
  if (field.type == expected) return {};
  return wire_error(std::string(what) + " (field " + std::to_string(field.number) + ") has wire type " +
                        std::string(wire_type_name(field.type)) + ", expected " + std::string(wire_type_name(expected)),
                    field.offset);
}

Result<std::uint64_t> count_packed_varints(const WireField& field, std::string_view what) {
  // Walking them also proves each is well-formed before anything is allocated.
  std::size_t pos = 0;
  std::uint64_t count = 0, ignored = 0;
  while (pos < field.payload.size()) {
    if (!read_varint(field.payload, pos, ignored))
      return wire_error("malformed packed " + std::string(what), field.payload_offset + pos);
    ++count;
  }
  return count;
}

}  // namespace ballast::onnx
