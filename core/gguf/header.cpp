#include "gguf/header.hpp"

#include <ballast/dtype.hpp>

#include "safetensors/header.hpp"  // first_invalid_utf8

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <numeric>
#include <unordered_set>

namespace ballast::gguf {

namespace {

// GGUF metadata value types.
enum : std::uint32_t {
  kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64, kValueTypeCount
};
constexpr std::array<std::string_view, kValueTypeCount> kValueTypeNames = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64",
    "float64"};
// Bytes of a fixed-size value; 0 for string and array.
constexpr std::array<unsigned, kValueTypeCount> kValueBytes = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
// The fewest bytes a value of each type takes (a string's length, an
// array's element type and count): what a count is checked against.
constexpr std::uint64_t min_value_bytes(std::uint32_t t) {
  return t == kString ? 8 : t == kArray ? 12 : kValueBytes[t];
}
constexpr std::uint64_t kMinEntryBytes = 8 + 4 + 1;       // key length, type, a one-byte value
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

Error at(ErrorCode code, std::string message, std::uint64_t offset, std::string_view tensor = {}) {
  Error e = make_error(code, std::move(message));
  e.offset = offset;
  if (!tensor.empty()) e.tensor = std::string(tensor.substr(0, 256));
  return e;
}

std::string named(std::string_view s) {
  std::string out = "'";
  out.append(s.substr(0, 128));
  if (s.size() > 128) out += "...";
  return out + "'";
}

template <class T>
std::string shortest(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// An integer metadata value, for the keys ballast reads (alignment, split).
struct Integer {
  bool negative = false;
  std::uint64_t magnitude = 0;
};

class Parser {
 public:
  Parser(Bytes file, const HeaderLimits& limits) : b_(file), limits_(limits) {}

  Result<Header> run();

 private:
  std::uint64_t remaining() const { return b_.size() - pos_; }
  Status need(std::uint64_t n, std::string_view what) const {
    if (n <= remaining()) return {};
    return at(ErrorCode::out_of_bounds,
              "file ends inside " + std::string(what) + ": " + std::to_string(n) + " bytes needed at offset " +
                  std::to_string(pos_) + ", " + std::to_string(remaining()) + " left",
              pos_, tensor_);
  }
  template <class T>
  T take() {  // after need()
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  Result<std::string_view> string(std::string_view what, std::uint64_t cap, const char* cap_name);
  Status value(std::uint32_t type, unsigned depth, MetadataEntry* out, std::optional<Integer>* integer,
               std::string_view key);
  Status entry(Header& h, std::unordered_set<std::string_view>& keys);
  Status special_key(Header& h, const MetadataEntry& e, const std::optional<Integer>& integer, std::uint64_t where);
  Status tensor_info(Header& h, std::unordered_set<std::string_view>& names);
  Status data_section(Header& h);
  Status keep(std::uint64_t bytes, std::uint64_t where) {
    kept_ += bytes;
    if (kept_ <= limits_.max_string_bytes) return {};
    return at(ErrorCode::overflow,
              "metadata keys and string values total more than LoadOptions::max_metadata_bytes (" +
                  std::to_string(limits_.max_string_bytes) + ")",
              where);
  }

  Bytes b_;
  const HeaderLimits& limits_;
  std::uint64_t pos_ = 0;
  std::uint64_t kept_ = 0;
  std::string_view tensor_;  // the tensor whose info is being read, for messages
};

Result<std::string_view> Parser::string(std::string_view what, std::uint64_t cap, const char* cap_name) {
  const std::uint64_t where = pos_;
  BALLAST_RETURN_IF_ERROR(need(8, std::string(what) + "'s length"));
  const auto n = take<std::uint64_t>();
  if (n > cap)
    return at(ErrorCode::overflow,
              std::string(what) + " of " + std::to_string(n) + " bytes exceeds " + cap_name + " (" +
                  std::to_string(cap) + ")",
              where, tensor_);
  BALLAST_RETURN_IF_ERROR(need(n, what));
  std::string_view s(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<std::size_t>(n));
  pos_ += n;
  return s;
}

Status Parser::value(std::uint32_t type, unsigned depth, MetadataEntry* out, std::optional<Integer>* integer,
                     std::string_view key) {
  const std::uint64_t where = pos_;
  auto in_key = [&](std::string m) { return "metadata key " + named(key) + ": " + m; };
  if (type >= kValueTypeCount)
    return at(ErrorCode::malformed, in_key("value type " + std::to_string(type) + " is not one GGUF defines (0-12)"),
              where);
  if (type == kString) {
    BALLAST_ASSIGN_OR_RETURN(const std::string_view s,
                             string("metadata key " + named(key) + "'s string value", limits_.max_string_bytes,
                                    "LoadOptions::max_metadata_bytes"));
    if (out != nullptr) {
      if (auto bad = safetensors::first_invalid_utf8(s))
        return at(ErrorCode::malformed, in_key("string value is not UTF-8 (byte " + std::to_string(*bad) + ")"),
                  where + 8 + *bad);
      BALLAST_RETURN_IF_ERROR(keep(s.size(), where));
      out->value = std::string(s);
    }
    return {};
  }
  if (type == kArray) {
    if (depth >= kMaxArrayDepth)
      return at(ErrorCode::malformed, in_key("arrays nest deeper than " + std::to_string(kMaxArrayDepth)), where);
    BALLAST_RETURN_IF_ERROR(need(12, in_key("array header")));
    const auto element = take<std::uint32_t>();
    const auto count = take<std::uint64_t>();
    if (element >= kValueTypeCount)
      return at(ErrorCode::malformed,
                in_key("array element type " + std::to_string(element) + " is not one GGUF defines (0-12)"), where);
    if (count > limits_.max_array_elements)
      return at(ErrorCode::overflow,
                in_key("array of " + std::to_string(count) + " elements exceeds LoadOptions::max_gguf_array_elements (" +
                       std::to_string(limits_.max_array_elements) + ")"),
                where);
    // count <= 2^24 and the minimum <= 12: the product cannot overflow.
    if (count * min_value_bytes(element) > remaining())
      return at(ErrorCode::out_of_bounds,
                in_key("array of " + std::to_string(count) + " " + std::string(kValueTypeNames[element]) +
                       " values cannot fit in the " + std::to_string(remaining()) + " bytes left"),
                where);
    if (out != nullptr) {
      out->type = "array[" + std::string(kValueTypeNames[element]) + "]";
      out->count = count;
    }
    if (element == kBool) {
      for (std::uint64_t i = 0; i < count; ++i)
        if (std::to_integer<unsigned>(b_[pos_ + i]) > 1)
          return at(ErrorCode::malformed, in_key("bool array element " + std::to_string(i) + " is neither 0 nor 1"),
                    pos_ + i);
    }
    if (kValueBytes[element] != 0) {
      pos_ += count * kValueBytes[element];
      return {};
    }
    for (std::uint64_t i = 0; i < count; ++i) BALLAST_RETURN_IF_ERROR(value(element, depth + 1, nullptr, nullptr, key));
    return {};
  }
  BALLAST_RETURN_IF_ERROR(need(kValueBytes[type], in_key(std::string(kValueTypeNames[type]) + " value")));
  std::string text;
  Integer n;
  bool is_integer = true;
  switch (type) {
    case kU8: n.magnitude = take<std::uint8_t>(); break;
    case kU16: n.magnitude = take<std::uint16_t>(); break;
    case kU32: n.magnitude = take<std::uint32_t>(); break;
    case kU64: n.magnitude = take<std::uint64_t>(); break;
    case kI8:
    case kI16:
    case kI32:
    case kI64: {
      std::int64_t v = type == kI8 ? take<std::int8_t>() : type == kI16 ? take<std::int16_t>()
                       : type == kI32 ? take<std::int32_t>() : take<std::int64_t>();
      n.negative = v < 0;
      n.magnitude = n.negative ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
      text = std::to_string(v);
      break;
    }
    case kBool: {
      const auto v = take<std::uint8_t>();
      if (v > 1) return at(ErrorCode::malformed, in_key("bool value is " + std::to_string(v) + ", neither 0 nor 1"), where);
      text = v ? "true" : "false";
      is_integer = false;
      break;
    }
    case kF32: text = shortest(take<float>()), is_integer = false; break;
    case kF64: text = shortest(take<double>()), is_integer = false; break;
    default: break;
  }
  if (text.empty()) text = std::to_string(n.magnitude);
  if (out != nullptr) out->value = std::move(text);
  if (integer != nullptr && is_integer) *integer = n;
  return {};
}

Status Parser::special_key(Header& h, const MetadataEntry& e, const std::optional<Integer>& integer,
                           std::uint64_t where) {
  auto bad = [&](std::string m) { return at(ErrorCode::malformed, "metadata key " + named(e.key) + ": " + m, where); };
  if (e.key == "general.alignment") {
    if (e.type != "uint32") return bad("must be a uint32 (it is a " + e.type + ")");
    const std::uint64_t a = integer->magnitude;
    if (a == 0 || (a & (a - 1)) != 0) return bad("alignment " + std::to_string(a) + " is not a power of two");
    h.alignment = a;
    return {};
  }
  const bool no = e.key == "split.no", count = e.key == "split.count", tensors = e.key == "split.tensors.count";
  if (!no && !count && !tensors) return {};
  if (!integer) return bad("must be an integer (it is a " + e.type + ")");
  if (integer->negative) return bad("is negative (" + e.value + ")");
  if (!h.split) h.split.emplace();
  if (tensors) {
    h.split->tensors = integer->magnitude;
  } else if (no) {
    h.split->no = integer->magnitude;
  } else {
    h.split->count = integer->magnitude;
    h.split->has_count = true;
  }
  return {};
}

Status Parser::entry(Header& h, std::unordered_set<std::string_view>& keys) {
  const std::uint64_t where = pos_;
  BALLAST_ASSIGN_OR_RETURN(const std::string_view key,
                           string("a metadata key", kMaxKeyBytes, "the specification's cap on keys"));
  if (key.empty()) return at(ErrorCode::malformed, "a metadata key is empty", where);
  if (auto bad = safetensors::first_invalid_utf8(key))
    return at(ErrorCode::malformed, "metadata key is not UTF-8 (byte " + std::to_string(*bad) + ")", where + 8 + *bad);
  if (!keys.insert(key).second)
    return at(ErrorCode::malformed, "metadata key " + named(key) + " appears twice; readers disagree on which counts",
              where);
  BALLAST_RETURN_IF_ERROR(keep(key.size(), where));
  BALLAST_RETURN_IF_ERROR(need(4, "metadata key " + named(key) + "'s value type"));
  const auto type = take<std::uint32_t>();
  MetadataEntry e;
  e.key = std::string(key);
  if (type < kValueTypeCount) e.type = std::string(kValueTypeNames[type]);
  std::optional<Integer> integer;
  const std::uint64_t value_at = pos_;
  BALLAST_RETURN_IF_ERROR(value(type, 0, &e, &integer, key));
  BALLAST_RETURN_IF_ERROR(special_key(h, e, integer, value_at));
  h.metadata.push_back(std::move(e));
  return {};
}

Status Parser::tensor_info(Header& h, std::unordered_set<std::string_view>& names) {
  TensorInfo t;
  t.info_offset = pos_;
  tensor_ = {};
  BALLAST_ASSIGN_OR_RETURN(const std::string_view name,
                           string("a tensor name", kMaxNameBytes, "the specification's cap on tensor names"));
  if (name.empty()) return at(ErrorCode::malformed, "a tensor name is empty", t.info_offset);
  if (auto bad = safetensors::first_invalid_utf8(name))
    return at(ErrorCode::malformed, "tensor name is not UTF-8 (byte " + std::to_string(*bad) + ")",
              t.info_offset + 8 + *bad);
  // As safetensors' header refuses "\u0000" (a NUL is valid UTF-8): the C
  // API and Python read a name up to its first NUL, so "a\0x" and "a\0y"
  // would both be "a" there, and neither found by its name.
  if (const auto nul = name.find('\0'); nul != std::string_view::npos)
    return at(ErrorCode::malformed,
              "tensor name holds a NUL byte (byte " + std::to_string(nul) + "); C callers would read it as " +
                  named(name.substr(0, nul)),
              t.info_offset);
  tensor_ = name;
  if (!names.insert(name).second)
    return at(ErrorCode::malformed, "two tensors have this name; readers disagree on which counts", t.info_offset, name);
  BALLAST_RETURN_IF_ERROR(need(4, "the tensor's n_dims"));
  const std::uint64_t dims_at = pos_;
  const auto n_dims = take<std::uint32_t>();
  if (n_dims > kMaxDims)
    return at(ErrorCode::malformed, "n_dims is " + std::to_string(n_dims) + "; GGUF tensors have at most 4", dims_at,
              name);
  BALLAST_RETURN_IF_ERROR(need(std::uint64_t{n_dims} * 8 + 4 + 8, "the tensor's dims, type and offset"));
  std::uint64_t elements = 1;
  for (std::uint32_t i = 0; i < n_dims; ++i) {
    const auto d = take<std::uint64_t>();
    if (d > static_cast<std::uint64_t>(INT64_MAX))
      return at(ErrorCode::malformed, "ne[" + std::to_string(i) + "] is " + std::to_string(d) + " (negative as int64)",
                dims_at + 4 + 8 * i, name);
    // The product checked as it grows: an overflowing one wrapped to a
    // small size is how a crafted file once got past a reader's checks.
    if (__builtin_mul_overflow(elements, d, &elements) || elements > static_cast<std::uint64_t>(INT64_MAX))
      return at(ErrorCode::overflow, "the product of the dims overflows int64", dims_at, name);
    t.ne.push_back(d);
  }
  if (elements > limits_.max_tensor_elements)
    return at(ErrorCode::overflow,
              std::to_string(elements) + " elements, more than LoadOptions::max_tensor_elements (" +
                  std::to_string(limits_.max_tensor_elements) + ")",
              dims_at, name);
  // As ONNX's decoder: with a 0 dim, each other dim is held to the cap.
  if (elements == 0)
    for (std::size_t i = 0; i < t.ne.size(); ++i)
      if (t.ne[i] > limits_.max_tensor_elements)
        return at(ErrorCode::overflow,
                  "ne[" + std::to_string(i) + "] is " + std::to_string(t.ne[i]) +
                      ", more than LoadOptions::max_tensor_elements (" + std::to_string(limits_.max_tensor_elements) +
                      "), though another ne is 0",
                  dims_at + 4 + 8 * i, name);
  const std::uint64_t type_at = pos_;
  const auto type_id = take<std::uint32_t>();
  const auto dtype = dtype_from_gguf_type(type_id);
  if (!dtype)
    return at(ErrorCode::unsupported, "tensor type id " + std::to_string(type_id) + " is not a type GGUF defines",
              type_at, name);
  t.dtype = *dtype;
  if (const auto block = dtype_block(t.dtype)) {
    const std::uint64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    if (ne0 % block->elements != 0)
      return at(ErrorCode::malformed,
                "ne[0] = " + std::to_string(ne0) + " is not a multiple of " + std::string(dtype_gguf_name(t.dtype)) +
                    "'s block of " + std::to_string(block->elements) + " elements",
                dims_at, name);
  }
  const auto bytes = dtype_storage_bytes(t.dtype, elements);
  if (!bytes) return at(ErrorCode::overflow, "the tensor's byte size overflows 64 bits", dims_at, name);
  t.bytes = *bytes;
  const std::uint64_t offset_at = pos_;
  t.offset = take<std::uint64_t>();
  if (t.offset % h.alignment != 0)
    return at(ErrorCode::malformed,
              "offset " + std::to_string(t.offset) + " is not a multiple of the alignment (" +
                  std::to_string(h.alignment) + ")",
              offset_at, name);
  t.name = std::string(name);
  h.tensors.push_back(std::move(t));
  tensor_ = {};
  return {};
}

Status Parser::data_section(Header& h) {
  h.header_bytes = pos_;
  const std::uint64_t a = h.alignment;
  if (__builtin_add_overflow(pos_, (a - pos_ % a) % a, &h.data_start))
    return at(ErrorCode::overflow, "the data section's start overflows 64 bits", pos_);
  const std::uint64_t size = b_.size();
  // The padding up to the data section is zeros (a file with no tensors may
  // end before it).
  for (std::uint64_t i = pos_; i < std::min(h.data_start, size); ++i)
    if (b_[i] != std::byte{0})
      return at(ErrorCode::malformed, "padding before the data section is not zero", i);
  std::uint64_t total = 0;
  for (const TensorInfo& t : h.tensors) {
    std::uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(h.data_start, t.offset, &begin) || __builtin_add_overflow(begin, t.bytes, &end))
      return at(ErrorCode::overflow, "the tensor's end overflows 64 bits", t.info_offset, t.name);
    if (end > size)
      return at(ErrorCode::out_of_bounds,
                "the tensor's bytes [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") run past the end of the file (" + std::to_string(size) + " bytes)",
                begin, t.name);
    // The sum, too: a reader that adds sizes unchecked allocates too little.
    if (__builtin_add_overflow(total, t.bytes, &total))
      return at(ErrorCode::overflow, "the tensors' byte sizes sum past 64 bits", t.info_offset, t.name);
  }
  std::vector<std::size_t> order(h.tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    const TensorInfo& a = h.tensors[x];
    const TensorInfo& b = h.tensors[y];
    if (a.offset != b.offset) return a.offset < b.offset;
    return a.bytes != b.bytes ? a.bytes > b.bytes : x < y;  // the longer first: the other is inside it
  });
  const TensorInfo* last = nullptr;  // the tensor whose end reaches furthest so far
  for (std::size_t i : order) {
    const TensorInfo& t = h.tensors[i];
    if (t.bytes == 0) continue;
    if (last != nullptr && t.offset < last->offset + last->bytes)
      return at(ErrorCode::malformed,
                "the tensor's bytes at offset " + std::to_string(t.offset) + " overlap tensor " + named(last->name) +
                    " (offset " + std::to_string(last->offset) + ", " + std::to_string(last->bytes) + " bytes)",
                h.data_start + t.offset, t.name);
    if (last == nullptr || t.offset + t.bytes > last->offset + last->bytes) last = &t;
  }
  return {};
}

Result<Header> Parser::run() {
  Header h;
  if (b_.size() < 24)
    return at(ErrorCode::out_of_bounds,
              "file of " + std::to_string(b_.size()) + " bytes ends inside the 24-byte GGUF header", 0);
  if (std::memcmp(b_.data(), "GGUF", 4) != 0) return at(ErrorCode::malformed, "magic is not \"GGUF\"", 0);
  pos_ = 4;
  h.version = take<std::uint32_t>();
  if (h.version == 1)
    return at(ErrorCode::unsupported, "GGUF version 1 (32-bit counts and lengths); ballast reads versions 2 and 3", 4);
  if (h.version != 0 && (h.version & 0xFFFFu) == 0)
    return at(ErrorCode::unsupported,
              "a big-endian GGUF file (its version reads " + std::to_string(h.version) +
                  " little-endian); ballast reads little-endian files only",
              4);
  if (h.version != 2 && h.version != 3)
    return at(ErrorCode::unsupported, "GGUF version " + std::to_string(h.version) + "; ballast reads versions 2 and 3",
              4);
  const auto tensor_count = take<std::uint64_t>();
  const auto entry_count = take<std::uint64_t>();
  if (tensor_count > limits_.max_tensors)
    return at(ErrorCode::overflow,
              "tensor count " + std::to_string(tensor_count) + " exceeds LoadOptions::max_tensors_per_file (" +
                  std::to_string(limits_.max_tensors) + ")",
              8);
  if (entry_count > limits_.max_metadata_entries)
    return at(ErrorCode::overflow,
              "metadata count " + std::to_string(entry_count) + " exceeds LoadOptions::max_gguf_metadata_entries (" +
                  std::to_string(limits_.max_metadata_entries) + ")",
              16);
  // Both counts are capped far below 2^32: the products cannot overflow.
  if (entry_count * kMinEntryBytes + tensor_count * kMinTensorInfoBytes > remaining())
    return at(ErrorCode::out_of_bounds,
              std::to_string(entry_count) + " metadata entries and " + std::to_string(tensor_count) +
                  " tensor infos cannot fit in the file's " + std::to_string(b_.size()) + " bytes",
              8);
  std::unordered_set<std::string_view> keys;
  keys.reserve(static_cast<std::size_t>(entry_count));
  h.metadata.reserve(static_cast<std::size_t>(entry_count));
  for (std::uint64_t i = 0; i < entry_count; ++i) BALLAST_RETURN_IF_ERROR(entry(h, keys));
  if (h.split) {
    if (h.split->no != 0 && !h.split->has_count)
      return at(ErrorCode::malformed,
                "split.no " + std::to_string(h.split->no) +
                    " without split.count: part of a split set that does "
                    "not say how many parts it has",
                24);
    if (h.split->count == 0 || h.split->no >= h.split->count)
      return at(ErrorCode::malformed,
                "split.no " + std::to_string(h.split->no) + " is not below split.count " +
                    std::to_string(h.split->count),
                24);
  }
  std::unordered_set<std::string_view> names;
  names.reserve(static_cast<std::size_t>(tensor_count));
  h.tensors.reserve(static_cast<std::size_t>(tensor_count));
  for (std::uint64_t i = 0; i < tensor_count; ++i) BALLAST_RETURN_IF_ERROR(tensor_info(h, names));
  BALLAST_RETURN_IF_ERROR(data_section(h));
  return h;
}

}  // namespace

Result<Header> parse_header(Bytes file, const HeaderLimits& limits) { return Parser(file, limits).run(); }

}  // namespace ballast::gguf
