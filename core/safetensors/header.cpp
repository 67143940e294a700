#include "safetensors/header.hpp"

#include "onnx/external_data.hpp"  // shown(): names cut for messages
#include "safetensors/json_events.hpp"

#include <ballast/dtype.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

namespace ballast::safetensors {

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";

// The header's events, checked as they arrive. The JSON has this shape:
//   { "<tensor>": {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]},
//     "__metadata__": {"<key>": "<value>", ...}, ... }
// Keys of a tensor other than those three are skipped (the reference parser
// ignores them too), at any nesting up to the depth cap.
class HeaderEvents final : public JsonEvents {
 public:
  explicit HeaderEvents(const HeaderLimits& limits) : limits_(limits) {}

  std::vector<TensorEntry> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;

 private:
  enum class Section { none, tensor, metadata };
  enum class Field { none, dtype, shape, offsets };

  bool on_key(unsigned depth, std::string& key) override {
    if (depth == 1) {
      // Tensor names are checked for duplicates once parsed (a sort, not a
      // hash set of copies: a million names cost no allocation each).
      if (key == kMetadataKey) {
        if (metadata_seen_) return fail(ErrorCode::malformed, "__metadata__ appears twice in the header");
        metadata_seen_ = true;
        section_ = Section::metadata;
      } else {
        // JSON may spell a NUL ("\u0000"), which the raw-byte check cannot
        // see. The C API and Python read a name up to its first NUL, so
        // "a\u0000x" and "a\u0000y" would be two weights both called "a"
        // there, and neither found by its name.
        if (const std::size_t nul = key.find('\0'); nul != std::string::npos) {
          std::string spelled;  // Error::tensor as the JSON spells it: a C caller's copy of the error is whole
          for (char c : key) spelled += c == '\0' ? std::string("\\u0000") : std::string(1, c);
          return fail(ErrorCode::malformed,
                      "tensor name holds a NUL character (U+0000); C callers would read it as " +
                          onnx::shown(key.substr(0, nul)),
                      spelled);
        }
        if (tensors.size() >= limits_.max_tensors)
          return fail(ErrorCode::overflow, "header lists more than " + std::to_string(limits_.max_tensors) +
                                               " tensors (LoadOptions::max_tensors_per_file)", key);
        section_ = Section::tensor;
        tensors.emplace_back();
        tensors.back().name = key;
        seen_ = 0;
      }
      return true;
    }
    if (depth == 2 && section_ == Section::metadata) {
      if (!metadata_keys_.insert(key).second)
        return fail(ErrorCode::malformed, "__metadata__ key " + onnx::shown(key) + " appears twice");
      metadata.emplace_back(key, std::string());
      return true;
    }
    if (depth == 2 && section_ == Section::tensor) {
      unsigned bit = 0;
      if (key == "dtype") {
        field_ = Field::dtype, bit = 1;
      } else if (key == "shape") {
        field_ = Field::shape, bit = 2;
      } else if (key == "data_offsets") {
        field_ = Field::offsets, bit = 4;
      } else {
        field_ = Field::none;
        skip_next_value();
        return true;
      }
      if ((seen_ & bit) != 0) return fail(ErrorCode::malformed, "field '" + key + "' is given twice", current());
      seen_ |= bit;
      return true;
    }
    return true;  // inside a skipped value
  }

  bool on_value(unsigned depth, const Value& v) override {
    if (depth == 0) {
      if (v.kind != Kind::object) return fail(ErrorCode::malformed, "the header is not a JSON object");
      return true;
    }
    if (depth == 1) {
      if (section_ == Section::metadata) {
        if (v.kind == Kind::null) return true;  // "no metadata", as the reference reads it
        if (v.kind != Kind::object) return fail(ErrorCode::malformed, "__metadata__ is not an object of strings");
        return true;
      }
      if (v.kind != Kind::object)
        return fail(ErrorCode::malformed, "tensor entry is a JSON " + std::string(kind_name(v.kind)) +
                                              ", not an object with dtype, shape and data_offsets", current());
      return true;
    }
    if (depth == 2 && section_ == Section::metadata) {
      if (v.kind != Kind::string)
        return fail(ErrorCode::malformed, "__metadata__ value of " + onnx::shown(metadata.back().first) +
                                              " is a JSON " + std::string(kind_name(v.kind)) + ", not a string");
      metadata_bytes_ += metadata.back().first.size() + v.text->size();
      if (metadata_bytes_ > limits_.max_metadata_bytes)
        return fail(ErrorCode::overflow, "__metadata__ holds more than " + std::to_string(limits_.max_metadata_bytes) +
                                             " bytes (LoadOptions::max_metadata_bytes)");
      metadata.back().second = std::move(*v.text);
      return true;
    }
    if (depth == 2 && section_ == Section::tensor) {
      TensorEntry& t = tensors.back();
      switch (field_) {
        case Field::dtype: {
          if (v.kind != Kind::string) return fail(ErrorCode::malformed, "dtype is not a string", t.name);
          t.dtype = dtype_named(*v.text);
          if (t.dtype == nullptr)
            return fail(ErrorCode::unsupported, "dtype " + onnx::shown(*v.text) + " is not a safetensors dtype", t.name);
          return true;
        }
        case Field::shape:
        case Field::offsets:
          if (v.kind != Kind::array)
            return fail(ErrorCode::malformed,
                        std::string(field_ == Field::shape ? "shape" : "data_offsets") + " is not an array", t.name);
          return true;
        case Field::none: return true;
      }
    }
    if (depth == 3 && section_ == Section::tensor && (field_ == Field::shape || field_ == Field::offsets)) {
      TensorEntry& t = tensors.back();
      const char* what = field_ == Field::shape ? "shape" : "data_offsets";
      if (v.kind != Kind::unsigned_number)
        return fail(ErrorCode::malformed,
                    std::string(what) + " holds a " +
                        (v.kind == Kind::negative_number ? std::string("negative number")
                         : v.kind == Kind::float_number  ? std::string("number that is not a 64-bit integer")
                                                         : "JSON " + std::string(kind_name(v.kind))),
                    t.name);
      if (field_ == Field::shape) {
        if (v.number > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
          return fail(ErrorCode::overflow, "shape dimension " + std::to_string(v.number) + " does not fit in 63 bits",
                      t.name);
        if (t.shape.size() >= kMaxRank)
          return fail(ErrorCode::unsupported, "shape has more than " + std::to_string(kMaxRank) + " dimensions", t.name);
        t.shape.push_back(static_cast<std::int64_t>(v.number));
      } else {
        if (offsets_seen_ >= 2) return fail(ErrorCode::malformed, "data_offsets has more than two numbers", t.name);
        (offsets_seen_ == 0 ? t.begin : t.end) = v.number;
        ++offsets_seen_;
      }
      return true;
    }
    return true;
  }

  bool on_end(unsigned depth, Kind kind) override {
    if (depth == 2 && kind == Kind::array && section_ == Section::tensor && field_ == Field::offsets) {
      if (offsets_seen_ != 2)
        return fail(ErrorCode::malformed, "data_offsets has " + std::to_string(offsets_seen_) + " numbers, not two [begin, end]",
                    current());
      offsets_seen_ = 0;
    }
    if (depth == 1 && kind == Kind::object && section_ == Section::tensor) {
      const char* missing = (seen_ & 1) == 0 ? "dtype" : (seen_ & 2) == 0 ? "shape" : (seen_ & 4) == 0 ? "data_offsets" : nullptr;
      if (missing != nullptr) return fail(ErrorCode::malformed, std::string("tensor has no ") + missing, current());
      section_ = Section::none;
    }
    if (depth == 1 && kind == Kind::object && section_ == Section::metadata) section_ = Section::none;
    return true;
  }

  std::string current() const { return tensors.empty() ? std::string() : tensors.back().name; }

  // Real tensors have at most 8; the cap keeps a hostile shape from asking
  // for gigabytes of dims.
  static constexpr std::size_t kMaxRank = 64;

  const HeaderLimits& limits_;
  bool metadata_seen_ = false;
  std::unordered_set<std::string> metadata_keys_;
  Section section_ = Section::none;
  Field field_ = Field::none;
  unsigned seen_ = 0;
  unsigned offsets_seen_ = 0;
  std::uint64_t metadata_bytes_ = 0;
};

Error located(ErrorCode code, std::string message, std::string_view tensor, std::uint64_t offset) {
  Error e = make_error(code, std::move(message));
  e.tensor = tensor.size() <= 256 ? std::string(tensor) : onnx::shown(tensor, 256);
  e.offset = offset;
  return e;
}

// Checks one entry's own fields: the element count, its size in bytes, and
// that data_offsets agree with it.
Status check_entry(const TensorEntry& t, const HeaderLimits& limits, std::uint64_t buffer_start) {
  const std::uint64_t where = buffer_start + std::min<std::uint64_t>(t.begin, UINT64_MAX - buffer_start);
  const auto elements = element_count(t.shape);
  if (!elements) return located(ErrorCode::overflow, "shape's element count overflows 64 bits", t.name, where);
  if (*elements > limits.max_tensor_elements)
    return located(ErrorCode::overflow,
                   "shape has " + std::to_string(*elements) + " elements, more than LoadOptions::max_tensor_elements (" +
                       std::to_string(limits.max_tensor_elements) + ")",
                   t.name, where);
  // As ONNX's decoder: with a 0 dim, each other dim is held to the cap.
  if (*elements == 0)
    for (std::int64_t d : t.shape)
      if (static_cast<std::uint64_t>(d) > limits.max_tensor_elements)
        return located(ErrorCode::overflow,
                       "shape has a dim of " + std::to_string(d) + ", more than LoadOptions::max_tensor_elements (" +
                           std::to_string(limits.max_tensor_elements) + "), though another dim is 0",
                       t.name, where);
  // The specification counts bits: a sub-byte tensor must fill whole bytes.
  if (t.dtype->bits % 8 != 0 && (*elements % 8) * t.dtype->bits % 8 != 0)
    return located(ErrorCode::size_mismatch,
                   std::to_string(*elements) + " elements of " + std::string(t.dtype->name) + " (" +
                       std::to_string(t.dtype->bits) + " bits each) do not fill whole bytes",
                   t.name, where);
  const auto bytes = dtype_storage_bytes(t.dtype->type, *elements);
  if (!bytes) return located(ErrorCode::overflow, "shape's byte size overflows 64 bits", t.name, where);
  if (t.end < t.begin)
    return located(ErrorCode::malformed,
                   "data_offsets end " + std::to_string(t.end) + " is before begin " + std::to_string(t.begin), t.name, where);
  if (t.end - t.begin != *bytes)
    return located(ErrorCode::size_mismatch,
                   "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") hold " +
                       std::to_string(t.end - t.begin) + " bytes; " + std::string(t.dtype->name) + " of this shape is " +
                       std::to_string(*bytes),
                   t.name, where);
  return {};
}

}  // namespace

std::optional<std::size_t> first_invalid_utf8(std::string_view text) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07u;
    } else {
      return i;  // a continuation byte first, an overlong lead (C0, C1) or past U+10FFFF (F5..FF)
    }
    if (n - i < len) return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0u) != 0x80u) return i;
      cp = (cp << 6) | (p[i + k] & 0x3Fu);
    }
    // Overlong forms, UTF-16 surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::nullopt;
}

bool looks_like_safetensors(Bytes first, std::uint64_t file_size) noexcept {
  // The length itself is not checked here (parse_header says what is wrong
  // with it): the signature is the JSON object starting right after it,
  // with a key, an end or a blank. An ONNX protobuf has no '{"' at byte 8
  // (a field key, then a length or a varint, are there).
  if (first.size() < 10 || file_size < 10) return false;
  const auto at = [&](std::size_t i) { return static_cast<char>(first[i]); };
  return at(8) == '{' && (at(9) == '"' || at(9) == '}' || at(9) == ' ' || at(9) == '\n' || at(9) == '\r' || at(9) == '\t');
}

Result<Header> parse_header(Bytes file, const HeaderLimits& limits) {
  if (file.size() < 8)
    return located(ErrorCode::out_of_bounds,
                   "file of " + std::to_string(file.size()) + " bytes is shorter than the 8-byte header length", "", 0);
  Header h;
  for (int i = 7; i >= 0; --i) h.json_bytes = (h.json_bytes << 8) | static_cast<std::uint8_t>(file[static_cast<std::size_t>(i)]);
  if (h.json_bytes > limits.max_header_bytes)
    return located(ErrorCode::overflow,
                   "header length " + std::to_string(h.json_bytes) + " exceeds the cap of " +
                       std::to_string(limits.max_header_bytes) + " bytes (LoadOptions::max_header_bytes)",
                   "", 0);
  if (h.json_bytes > file.size() - 8)
    return located(ErrorCode::out_of_bounds,
                   "header length " + std::to_string(h.json_bytes) + " runs past the end of the file (" +
                       std::to_string(file.size() - 8) + " bytes follow the length)",
                   "", 0);
  h.buffer_start = 8 + h.json_bytes;
  const std::string_view json(reinterpret_cast<const char*>(file.data()) + 8, h.json_bytes);
  if (json.empty() || json.front() != '{')
    return located(ErrorCode::malformed, "header does not begin with '{'", "", 8);
  if (auto bad = first_invalid_utf8(json)) return located(ErrorCode::malformed, "header is not valid UTF-8", "", 8 + *bad);

  HeaderEvents events(limits);
  if (Status s = events.parse(json, limits.max_metadata_bytes); !s.ok()) {
    Error e = std::move(s.error());
    e.offset = 8 + e.offset.value_or(0);  // the parser counts within the JSON
    return e;
  }
  h.metadata = std::move(events.metadata);
  h.tensors = std::move(events.tensors);
  {
    std::vector<const TensorEntry*> by_name;
    by_name.reserve(h.tensors.size());
    for (const TensorEntry& t : h.tensors) by_name.push_back(&t);
    std::sort(by_name.begin(), by_name.end(), [](const TensorEntry* a, const TensorEntry* b) { return a->name < b->name; });
    for (std::size_t i = 1; i < by_name.size(); ++i)
      if (by_name[i]->name == by_name[i - 1]->name)
        return located(ErrorCode::malformed, "tensor appears twice in the header (readers disagree on which one counts)",
                       by_name[i]->name, 8);
  }

  const std::uint64_t buffer = file.size() - h.buffer_start;
  for (const TensorEntry& t : h.tensors)
    if (Status s = check_entry(t, limits, h.buffer_start); !s.ok()) return std::move(s.error());
  std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // In buffer order every tensor must start where the one before ended:
  // no overlap (two tensors sharing bytes) and no hole (bytes no tensor
  // covers, where a second format's data could hide).
  std::uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  auto hole = [&](std::uint64_t from, std::uint64_t to, std::string_view near) -> Status {
    if (limits.allow_holes) {
      h.holes.push_back({h.buffer_start + from, to - from});
      return {};
    }
    return located(
        ErrorCode::malformed,
        "byte buffer bytes [" + std::to_string(from) + ", " + std::to_string(to) +
            ") belong to no tensor; the specification forbids holes (LoadOptions::allow_holes, --allow-holes "
            "on the command line, opens such a file and reports them as dead bytes)",
        near, h.buffer_start + from);
  };
  for (const TensorEntry& t : h.tensors) {
    if (t.end > buffer)
      return located(ErrorCode::out_of_bounds,
                     "data_offsets end " + std::to_string(t.end) + " is past the byte buffer (" + std::to_string(buffer) +
                         " bytes)",
                     t.name, h.buffer_start + std::min(t.begin, buffer));
    if (t.begin < covered && previous != nullptr) {
      Error e = located(ErrorCode::malformed,
                        "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ") overlap tensor " +
                            onnx::shown(previous->name) + " [" + std::to_string(previous->begin) + ", " +
                            std::to_string(previous->end) + ")",
                        t.name, h.buffer_start + t.begin);
      return e;
    }
    if (t.begin > covered)
      if (Status s = hole(covered, t.begin, t.name); !s.ok()) return std::move(s.error());
    covered = t.end;
    previous = &t;
  }
  if (covered < buffer)
    if (Status s = hole(covered, buffer, previous ? std::string_view(previous->name) : std::string_view()); !s.ok())
      return std::move(s.error());
  return h;
}

}  // namespace ballast::safetensors
