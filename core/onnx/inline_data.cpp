#include "onnx/inline_data.hpp"

#include <cstring>
#include <limits>
#include <new>

namespace ballast::onnx {

namespace {

// Calls fn(field) for every occurrence of field `number` in `message`.
template <class Fn>
Status for_each_occurrence(const WireField& message, std::uint32_t number, Fn&& fn) {
  WireReader reader(message.payload, message.payload_offset);
  WireField field;
  while (!reader.at_end()) {
    if (!reader.next(field)) return reader.error();
    if (field.number != number) continue;
    BALLAST_RETURN_IF_ERROR(fn(field));
  }
  return {};
}

WireType fixed_type(std::size_t width) { return width == 4 ? WireType::fixed32 : WireType::fixed64; }

// `count` values of `width` bytes each, checked: the product of two 64-bit
// counts, and then the address space, bound it.
Result<std::shared_ptr<std::vector<std::byte>>> allocate(std::uint64_t count, std::uint64_t width) {
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, width, &bytes) || bytes > std::numeric_limits<std::size_t>::max())
    return make_error(ErrorCode::overflow, std::to_string(count) + " values of " + std::to_string(width) +
                                               " bytes overflow the address space");
  try {
    return std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(bytes));
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes for decoded values");
  } catch (const std::length_error&) {
    return make_error(ErrorCode::out_of_memory, "cannot allocate " + std::to_string(bytes) + " bytes for decoded values");
  }
}

}  // namespace

Result<InlineData> gather_fixed(const WireField& message, std::uint32_t number, std::size_t width,
                                std::string_view what) {
  std::uint64_t count = 0;
  std::uint64_t runs = 0;  // 64 bits: a 32-bit count wraps back to "one run" after 2^32 runs
  Bytes single;
  Status scanned = for_each_occurrence(message, number, [&](const WireField& f) -> Status {
    ++runs;
    if (f.type == WireType::len) {
      if (f.payload.size() % width != 0)
        return wire_error("packed " + std::string(what) + " is " + std::to_string(f.payload.size()) +
                              " bytes, not a multiple of " + std::to_string(width),
                          f.payload_offset);
      if (__builtin_add_overflow(count, f.payload.size() / width, &count))
        return wire_error("too many " + std::string(what) + " values", f.payload_offset);
      single = f.payload;
      return {};
    }
    BALLAST_RETURN_IF_ERROR(expect_wire_type(f, fixed_type(width), what));
    ++count;
    single = {};
    return {};
  });
  if (!scanned.ok()) return scanned;
  if (runs == 1 && single.data() != nullptr) return InlineData{single, nullptr, count};
  if (runs == 0) return InlineData{};

  BALLAST_ASSIGN_OR_RETURN(auto buffer, allocate(count, width));
  std::byte* out = buffer->data();
  Status copied = for_each_occurrence(message, number, [&](const WireField& f) -> Status {
    if (!f.payload.empty()) std::memcpy(out, f.payload.data(), f.payload.size());
    out += f.payload.size();
    return {};
  });
  if (!copied.ok()) return copied;
  std::shared_ptr<const std::vector<std::byte>> owned = std::move(buffer);
  return InlineData{Bytes(owned->data(), owned->size()), owned, count};
}

Result<std::uint64_t> count_varints(const WireField& message, std::uint32_t number, std::string_view what) {
  std::uint64_t count = 0;
  Status scanned = for_each_occurrence(message, number, [&](const WireField& f) -> Status {
    if (f.type == WireType::len) {
      BALLAST_ASSIGN_OR_RETURN(auto n, count_packed_varints(f, what));
      if (__builtin_add_overflow(count, n, &count))
        return wire_error("too many " + std::string(what) + " values", f.payload_offset);
      return {};
    }
    BALLAST_RETURN_IF_ERROR(expect_wire_type(f, WireType::varint, what));
    ++count;
    return {};
  });
  if (!scanned.ok()) return scanned;
  return count;
}

Result<InlineData> gather_varints(const WireField& message, std::uint32_t number, std::uint64_t count,
                                  std::size_t out_width, bool as_bool, std::string_view what, VarintField field) {
  BALLAST_ASSIGN_OR_RETURN(auto buffer, allocate(count, out_width));
  std::byte* out = buffer->data();
  std::byte* const end = out + buffer->size();
  const unsigned bits = static_cast<unsigned>(out_width * 8);
  const bool checked = field != VarintField::unchecked && !as_bool && bits < 64;
  auto fits = [&](std::uint64_t v) {
    if (!checked) return true;
    if (field != VarintField::signed_values) return (v >> bits) == 0;
    const auto s = static_cast<std::int64_t>(v);
    return s >= -(std::int64_t{1} << (bits - 1)) && s < (std::int64_t{1} << bits);
  };
  auto too_wide = [&](std::uint64_t v, std::uint64_t offset) {
    const std::string shown =
        field != VarintField::unsigned_values ? std::to_string(static_cast<std::int64_t>(v)) : std::to_string(v);
    return wire_error(std::string(what) + " value " + shown + " does not fit in the " + std::to_string(bits) +
                          " bits of an element",
                      offset);
  };
  auto put = [&](std::uint64_t v) {
    if (out == end) return false;
    if (as_bool) v = (v & 0xffffffffu) != 0 ? 1 : 0;
    for (std::size_t i = 0; i < out_width; ++i) *out++ = static_cast<std::byte>((v >> (8 * i)) & 0xffu);
    return true;
  };
  Status written = for_each_occurrence(message, number, [&](const WireField& f) -> Status {
    if (f.type != WireType::len) {
      if (!fits(f.value)) return too_wide(f.value, f.offset);
      if (!put(f.value)) return wire_error(std::string(what) + " changed between passes", f.offset);
      return {};
    }
    std::size_t pos = 0;
    std::uint64_t v = 0;
    while (pos < f.payload.size()) {
      const std::size_t at = pos;
      if (!read_varint(f.payload, pos, v)) return wire_error("malformed packed " + std::string(what), f.payload_offset + pos);
      if (!fits(v)) return too_wide(v, f.payload_offset + at);
      if (!put(v)) return wire_error("malformed packed " + std::string(what), f.payload_offset + pos);
    }
    return {};
  });
  if (!written.ok()) return written;
  std::shared_ptr<const std::vector<std::byte>> owned = std::move(buffer);
  return InlineData{Bytes(owned->data(), owned->size()), owned, count};
}

}  // namespace ballast::onnx
