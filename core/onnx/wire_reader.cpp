#include "onnx/wire_reader.hpp"

#include <cstring>

namespace ballast::onnx {

namespace {
constexpr std::size_t kMaxVarintBytes = 10;
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

bool read_varint_slow(Bytes bytes, std::size_t& pos, std::uint64_t& value) noexcept {
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

bool WireReader::fail(const char* what, std::uint64_t offset, std::uint32_t number, std::uint64_t a,
                      std::uint64_t b) {
  error_what_ = what;
  error_offset_ = offset;
  error_number_ = number;
  error_a_ = a;
  error_b_ = b;
  pos_ = bytes_.size();  // stop: nothing after a malformed field can be trusted
  return false;
}

Error WireReader::error() const {
  if (!error_what_) return make_error(ErrorCode::internal, "no wire format error to report");
  std::string message = error_what_;
  const std::string_view what(error_what_);
  // append(), not "literal" + string: GCC 12 warns (-Wrestrict, a false
  // positive) on that form in optimised builds.
  if (what == "invalid field number") {
    message.append(" ").append(std::to_string(error_number_));
  } else if (what == "claims more bytes than remain in field") {
    message.assign("field ")
        .append(std::to_string(error_number_))
        .append(" claims ")
        .append(std::to_string(error_a_))
        .append(" bytes but only ")
        .append(std::to_string(error_b_))
        .append(" remain");
  } else if (what == "invalid wire type") {
    message.append(" ").append(std::to_string(error_a_)).append(" in field ").append(std::to_string(error_number_));
  } else if (error_number_ != 0) {
    message.append(" (field ").append(std::to_string(error_number_)).append(")");
  }
  return wire_error(std::move(message), error_offset_);
}

Result<WireField> WireReader::next() {
  WireField f;
  if (!next(f)) return error();
  return f;
}

Error wire_type_error(const WireField& field, WireType expected, std::string_view what) {
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
