// JsonEvents: nlohmann/json's event (SAX) parser turned into the three
// calls a format reader needs (a key, a value's start, a container's end),
// each with the depth it sits at, plus what every reader of a hostile file
// wants once: a nesting cap, a way to skip a value it does not read, and
// the first error kept, with the parser's own position when the JSON is
// not JSON. No document tree is built: memory is what the reader keeps.
#pragma once

#include <ballast/status.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

namespace ballast::safetensors {

class JsonEvents {
 public:
  enum class Kind { null, boolean, unsigned_number, negative_number, float_number, string, object, array };
  static const char* kind_name(Kind k) noexcept {
    switch (k) {
      case Kind::null: return "null";
      case Kind::boolean: return "boolean";
      case Kind::unsigned_number:
      case Kind::negative_number:
      case Kind::float_number: return "number";
      case Kind::string: return "string";
      case Kind::object: return "object";
      case Kind::array: return "array";
    }
    return "value";
  }
  struct Value {
    Kind kind = Kind::null;
    std::uint64_t number = 0;     // unsigned_number
    std::string* text = nullptr;  // string: the parser's buffer, may be moved from
  };

  // Where a string literal longer than `cap` bytes starts in `json`, if
  // one does: quotes found with memchr, escapes skipped, O(n). A string left
  // open runs to the end (the parser then says the JSON ends early).
  static std::optional<std::size_t> string_longer_than(std::string_view json, std::uint64_t cap) noexcept {
    std::size_t i = 0;
    while (i < json.size()) {
      const std::size_t open = json.find('"', i);
      if (open == std::string_view::npos) return std::nullopt;
      std::size_t j = open + 1;
      while (j < json.size()) {
        const std::size_t q = json.find_first_of("\"\\", j);
        if (q == std::string_view::npos) {
          j = json.size();
          break;
        }
        if (json[q] == '\\') {
          j = q + 2;
          continue;
        }
        j = q;
        break;
      }
      if (std::min(j, json.size()) - open - 1 > cap) return open;
      i = j + 1;
    }
    return std::nullopt;
  }

  // Nesting deeper than this is refused (the formats nest three deep; the
  // parser itself keeps one bit per level, so this bounds time, not stack).
  static constexpr unsigned kMaxDepth = 64;

  virtual ~JsonEvents() = default;

  // Parses `json` completely (trailing whitespace allowed, nothing else).
  // No string of it may be longer than `max_string_bytes` (checked before
  // the parser runs: it would hold such a string whole).
  Status parse(std::string_view json, std::uint64_t max_string_bytes) {
    // nlohmann's lexer takes a NUL byte for the end of the input, so
    // "{}\0<anything>" would parse as "{}". JSON has no raw NUL anywhere
    // (not even in strings), so one is refused before the parser runs.
    if (const auto nul = json.find('\0'); nul != std::string_view::npos) {
      Error e = make_error(ErrorCode::malformed, "not valid JSON: a NUL byte");
      e.offset = nul;
      return e;
    }
    if (auto at = string_longer_than(json, max_string_bytes)) {
      Error e = make_error(ErrorCode::overflow, "a JSON string longer than " + std::to_string(max_string_bytes) +
                                                    " bytes (LoadOptions::max_metadata_bytes)");
      e.offset = *at;
      return e;
    }
    const bool ok = nlohmann::json::sax_parse(json.begin(), json.end(), this, nlohmann::json::input_format_t::json,
                                              /*strict=*/true, /*ignore_comments=*/false);
    if (error_) return std::move(*error_);
    if (!ok) return make_error(ErrorCode::malformed, "the JSON ends early");
    return {};
  }

  // ---- nlohmann's SAX interface (json_sax<json>); the names are its own.
  bool null() { return value({Kind::null}); }
  bool boolean(bool) { return value({Kind::boolean}); }
  bool number_integer(nlohmann::json::number_integer_t n) {
    return n < 0 ? value({Kind::negative_number}) : value({Kind::unsigned_number, static_cast<std::uint64_t>(n)});
  }
  bool number_unsigned(nlohmann::json::number_unsigned_t n) { return value({Kind::unsigned_number, n}); }
  bool number_float(nlohmann::json::number_float_t, const std::string&) { return value({Kind::float_number}); }
  bool string(std::string& s) { return value({Kind::string, 0, &s}); }
  bool binary(nlohmann::json::binary_t&) { return fail(ErrorCode::malformed, "binary value in JSON"); }
  bool start_object(std::size_t) { return open(Kind::object); }
  bool start_array(std::size_t) { return open(Kind::array); }
  bool end_object() { return close(Kind::object); }
  bool end_array() { return close(Kind::array); }
  bool key(std::string& k) { return skipping() ? true : on_key(depth_, k); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    if (!error_) {
      // ex.what() reads "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
      std::string what = ex.what();
      if (const auto cut = what.find("] "); cut != std::string::npos) what = what.substr(cut + 2);
      Error e = make_error(ErrorCode::malformed, "not valid JSON: " + what);
      e.offset = position > 0 ? position - 1 : 0;  // the parser counts from 1 past the byte it stopped at
      error_ = std::move(e);
    }
    return false;
  }

 protected:
  // A key of the object at `depth` (1 = the top object's keys).
  virtual bool on_key(unsigned depth, std::string& key) = 0;
  // A value (a scalar, or the start of an object or array) at `depth`
  // (0 = the top value; 1 = a value of the top object or array).
  virtual bool on_value(unsigned depth, const Value& v) = 0;
  // The end of the object or array whose start was reported at `depth`.
  virtual bool on_end(unsigned depth, Kind kind) = 0;

  // Called from on_key: the next value (whatever its nesting) is skipped.
  void skip_next_value() noexcept { skip_next_ = true; }

  bool fail(ErrorCode code, std::string message, std::string_view tensor = {}) {
    if (!error_) {
      Error e = make_error(code, std::move(message));
      e.tensor = std::string(tensor.substr(0, 256));
      error_ = std::move(e);
    }
    return false;
  }

 private:
  bool skipping() const noexcept { return skip_from_ != 0; }

  bool value(const Value& v) {
    if (skipping()) return true;
    if (skip_next_) {
      skip_next_ = false;
      return true;
    }
    return on_value(depth_, v);
  }
  bool open(Kind kind) {
    if (depth_ >= kMaxDepth)
      return fail(ErrorCode::malformed, "JSON nests deeper than " + std::to_string(kMaxDepth) + " levels");
    if (!skipping()) {
      if (skip_next_) {
        skip_next_ = false;
        skip_from_ = depth_ + 1;
      } else if (!on_value(depth_, {kind})) {
        return false;
      }
    }
    ++depth_;
    return true;
  }
  bool close(Kind kind) {
    --depth_;
    if (skipping()) {
      if (depth_ + 1 == skip_from_) skip_from_ = 0;
      return true;
    }
    return on_end(depth_, kind);
  }

  unsigned depth_ = 0;
  unsigned skip_from_ = 0;  // depth + 1 of the container being skipped; 0 = none
  bool skip_next_ = false;
  std::optional<Error> error_;
};

}  // namespace ballast::safetensors
