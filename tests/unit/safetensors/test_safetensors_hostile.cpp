// The hostile table for safetensors headers and indexes: every refusal the
// specification (and its reference parser) makes, and the abuses a header
// can attempt (absurd shapes, a million tensors, deep nesting, huge
// metadata). Each case: a typed error naming the tensor or field, in
// bounded time (docs/sources.md lists the refusals).
#include "safetensors/header.hpp"
#include "safetensors/index.hpp"
#include "unit/safetensors/writer.hpp"
#include "support/counting_new.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>

using namespace ballast;
using namespace ballast::testing;

namespace {

struct Case {
  const char* what;
  std::vector<std::uint8_t> file;
  ErrorCode code;
  const char* says;           // a phrase of the message
  const char* tensor = "";    // Error::tensor, when the refusal is about one
};

std::vector<std::uint8_t> raw(const std::string& json, std::size_t buffer = 0) { return st_file_raw(json, pattern(buffer)); }

std::vector<std::uint8_t> with_length(std::uint64_t n, const std::string& rest) {
  std::vector<std::uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::string t(const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return json_quoted(name) + ":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

std::vector<Case> header_cases() {
  std::vector<Case> c;
  c.push_back({"shorter than the length field", {1, 2, 3}, ErrorCode::out_of_bounds, "shorter than the 8-byte"});
  c.push_back({"header length past the end", with_length(1000, "{}"), ErrorCode::out_of_bounds, "past the end of the file"});
  c.push_back({"header length over the cap", with_length(100'000'001, "{}"), ErrorCode::overflow, "exceeds the cap"});
  c.push_back({"header length of all ones", with_length(UINT64_MAX, "{}"), ErrorCode::overflow, "exceeds the cap"});
  c.push_back({"not beginning with {", raw(" {}"), ErrorCode::malformed, "does not begin with '{'"});
  c.push_back({"a JSON array", raw("[]"), ErrorCode::malformed, "does not begin with '{'"});
  c.push_back({"not UTF-8", raw("{\"a\xff\":1}"), ErrorCode::malformed, "not valid UTF-8"});
  c.push_back({"an overlong UTF-8 form", raw("{\"\xc0\xaf\":1}"), ErrorCode::malformed, "not valid UTF-8"});
  c.push_back({"a UTF-16 surrogate in UTF-8", raw("{\"\xed\xa0\x80\":1}"), ErrorCode::malformed, "not valid UTF-8"});
  c.push_back({"not JSON", raw("{\"a\":}"), ErrorCode::malformed, "not valid JSON"});
  c.push_back({"trailing bytes that are not spaces", raw("{}x"), ErrorCode::malformed, "not valid JSON"});
  c.push_back({"a NUL pad", raw(std::string("{}\0", 3)), ErrorCode::malformed, "a NUL byte"});
  // nlohmann's lexer stops at NUL: what follows one must not vanish unread.
  c.push_back({"a NUL, then more JSON", raw(std::string("{}\0{\"a\":{}}", 12)), ErrorCode::malformed, "a NUL byte"});
  c.push_back({"a NUL inside a string", raw(std::string("{\"a\0\":1}", 8)), ErrorCode::malformed, "a NUL byte"});
  // JSON's escape for NUL passes the raw-byte check; a C caller would read "a".
  c.push_back({"a tensor name with \\u0000", raw(R"({"a\u0000x":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1),
               ErrorCode::malformed, "NUL character", "a\\u0000x"});
  c.push_back({"truncated JSON", raw("{\"a\":{\"dtype\""), ErrorCode::malformed, "not valid JSON"});
  c.push_back({"a tensor twice", raw("{" + t("a", "U8", "[1]", "[0,1]") + "," + t("a", "U8", "[1]", "[1,2]") + "}", 2),
               ErrorCode::malformed, "appears twice", "a"});
  c.push_back({"__metadata__ twice", raw(R"({"__metadata__":{},"__metadata__":{}})"), ErrorCode::malformed,
               "__metadata__ appears twice"});
  c.push_back({"a metadata key twice", raw(R"({"__metadata__":{"k":"1","k":"2"}})"), ErrorCode::malformed,
               "appears twice"});
  c.push_back({"a metadata value that is not a string", raw(R"({"__metadata__":{"k":1}})"), ErrorCode::malformed,
               "not a string"});
  c.push_back({"a field twice", raw(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", 1),
               ErrorCode::malformed, "given twice", "a"});
  c.push_back({"a tensor that is not an object", raw(R"({"a":[1,2]})"), ErrorCode::malformed, "not an object", "a"});
  c.push_back({"no dtype", raw(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", 1), ErrorCode::malformed, "no dtype", "a"});
  c.push_back({"no data_offsets", raw(R"({"a":{"dtype":"U8","shape":[1]}})", 1), ErrorCode::malformed, "no data_offsets", "a"});
  c.push_back({"an unknown dtype", raw("{" + t("a", "Q4_K", "[1]", "[0,1]") + "}", 1), ErrorCode::unsupported,
               "not a safetensors dtype", "a"});
  c.push_back({"a negative dimension", raw("{" + t("a", "U8", "[-1]", "[0,1]") + "}", 1), ErrorCode::malformed,
               "negative number", "a"});
  c.push_back({"a fractional dimension", raw("{" + t("a", "U8", "[1.5]", "[0,1]") + "}", 1), ErrorCode::malformed,
               "not a 64-bit integer", "a"});
  c.push_back({"a dimension past 64 bits", raw("{" + t("a", "U8", "[18446744073709551616]", "[0,1]") + "}", 1),
               ErrorCode::malformed, "not a 64-bit integer", "a"});
  c.push_back({"a dimension past 63 bits", raw("{" + t("a", "U8", "[9223372036854775808]", "[0,1]") + "}", 1),
               ErrorCode::overflow, "63 bits", "a"});
  c.push_back({"an element count overflowing 64 bits",
               raw("{" + t("a", "U8", "[4294967296,4294967296]", "[0,1]") + "}", 1), ErrorCode::overflow,
               "element count overflows", "a"});
  c.push_back({"a dimension past the cap beside a 0",
               raw("{" + t("a", "F32", "[4611686018427387904,0]", "[0,0]") + "}", 1), ErrorCode::overflow,
               "a dim of 4611686018427387904, more than LoadOptions::max_tensor_elements", "a"});
  c.push_back({"a byte size overflowing 64 bits", raw("{" + t("a", "F64", "[4611686018427387904]", "[0,1]") + "}", 1),
               ErrorCode::overflow, "LoadOptions::max_tensor_elements", "a"});
  c.push_back({"three data_offsets", raw("{" + t("a", "U8", "[1]", "[0,1,2]") + "}", 1), ErrorCode::malformed,
               "more than two", "a"});
  c.push_back({"one data_offset", raw("{" + t("a", "U8", "[1]", "[0]") + "}", 1), ErrorCode::malformed, "not two", "a"});
  c.push_back({"end before begin", raw("{" + t("a", "U8", "[0]", "[2,1]") + "}", 2), ErrorCode::malformed,
               "is before begin", "a"});
  c.push_back({"size different from shape x dtype", raw("{" + t("a", "F32", "[2]", "[0,4]") + "}", 4),
               ErrorCode::size_mismatch, "F32 of this shape is 8", "a"});
  c.push_back({"offsets past the buffer", raw("{" + t("a", "U8", "[8]", "[0,8]") + "}", 4), ErrorCode::out_of_bounds,
               "past the byte buffer", "a"});
  c.push_back({"offsets at 2^64", raw("{" + t("a", "U8", "[1]", "[18446744073709551615,0]") + "}", 4),
               ErrorCode::malformed, "is before begin", "a"});
  c.push_back({"overlapping ranges",
               raw("{" + t("a", "U8", "[4]", "[0,4]") + "," + t("b", "U8", "[4]", "[2,6]") + "}", 6),
               ErrorCode::malformed, "overlap tensor 'a'", "b"});
  c.push_back({"two tensors on one range", raw("{" + t("a", "U8", "[4]", "[0,4]") + "," + t("b", "U8", "[4]", "[0,4]") + "}", 4),
               ErrorCode::malformed, "overlap", "b"});
  c.push_back({"a hole", raw("{" + t("a", "U8", "[4]", "[2,6]") + "}", 6), ErrorCode::malformed, "belong to no tensor", "a"});
  // Each boundary by one byte: the checks are exact, not approximately right.
  c.push_back({"an overlap of one byte",
               raw("{" + t("a", "U8", "[4]", "[0,4]") + "," + t("b", "U8", "[2]", "[3,5]") + "}", 5), ErrorCode::malformed,
               "overlap tensor 'a'", "b"});
  c.push_back({"a hole of one byte", raw("{" + t("a", "U8", "[2]", "[0,2]") + "," + t("b", "U8", "[2]", "[3,5]") + "}", 5),
               ErrorCode::malformed, "[2, 3) belong to no tensor", "b"});
  c.push_back({"one trailing byte", raw("{" + t("a", "U8", "[4]", "[0,4]") + "}", 5), ErrorCode::malformed,
               "[4, 5) belong to no tensor", "a"});
  c.push_back({"one byte past the buffer", raw("{" + t("a", "U8", "[5]", "[0,5]") + "}", 4), ErrorCode::out_of_bounds,
               "past the byte buffer", "a"});
  c.push_back({"header length one past the end", with_length(3, "{}"), ErrorCode::out_of_bounds, "past the end of the file"});
  c.push_back({"trailing buffer bytes", raw("{" + t("a", "U8", "[4]", "[0,4]") + "}", 9), ErrorCode::malformed,
               "belong to no tensor", "a"});
  c.push_back({"nesting past the cap", raw("{\"a\":{\"x\":" + std::string(100, '[') + std::string(100, ']') + "}}"),
               ErrorCode::malformed, "deeper than"});
  c.push_back({"a shape of 65 dimensions", raw("{" + t("a", "U8", "[" + [] {
                                                            std::string s;
                                                            for (int i = 0; i < 65; ++i) s += i ? ",1" : "1";
                                                            return s;
                                                          }() + "]", "[0,1]") + "}", 1),
               ErrorCode::unsupported, "more than 64 dimensions", "a"});
  return c;
}

}  // namespace

TEST_CASE("hostile safetensors headers: each refused with a typed error, in bounded time") {
  for (const Case& c : header_cases()) {
    const std::string what = c.what;
    CAPTURE(what);
    const auto start = std::chrono::steady_clock::now();
    std::optional<Result<safetensors::Header>> parsed;
    const std::size_t heap = peak_growth([&] { parsed.emplace(safetensors::parse_header(std::as_bytes(std::span(c.file)), {})); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(seconds < kTimeBound);
    CHECK(heap < kMemoryBound);
    auto& r = *parsed;
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == c.code);
    CHECK_MESSAGE(r.error().message.find(c.says) != std::string::npos, r.error().message);
    CHECK(r.error().tensor == c.tensor);
    CHECK(r.error().offset.has_value());
  }
}

TEST_CASE("the same refusals through open_model name the file") {
  ScratchDir dir("st-hostile-files");
  int i = 0;
  for (const Case& c : header_cases()) {
    const std::string what = c.what;
    CAPTURE(what);
    const auto path = dir.write("case" + std::to_string(i++) + ".safetensors", c.file);
    auto r = open_model(path);
    REQUIRE_FALSE(r.ok());
    // A file too short or whose header does not begin with '{' is not told
    // to be safetensors at all: unsupported, naming the file.
    if (r.error().code != ErrorCode::unsupported) CHECK(r.error().code == c.code);
    CHECK(r.error().file.find(path.filename().string()) != std::string::npos);
  }
}

TEST_CASE("the caps are exact: a header and a string of exactly the cap are read, one byte more is not") {
  const std::string json = R"({"__metadata__":{"k":"0123456789"}})";
  const auto file = raw(json);
  safetensors::HeaderLimits at_cap;
  at_cap.max_header_bytes = json.size();
  // The longest string is "__metadata__" (12 bytes); the metadata holds 11 ("k" and its value).
  at_cap.max_metadata_bytes = 12;
  CHECK(safetensors::parse_header(std::as_bytes(std::span(file)), at_cap).ok());
  safetensors::HeaderLimits below = at_cap;
  below.max_header_bytes = json.size() - 1;
  CHECK(safetensors::parse_header(std::as_bytes(std::span(file)), below).error().code == ErrorCode::overflow);
  below = at_cap;
  below.max_metadata_bytes = 11;  // "__metadata__" is 12 bytes
  auto refused = safetensors::parse_header(std::as_bytes(std::span(file)), below);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("JSON string longer than 11") != std::string::npos);
  // Exactly the header length the file holds.
  const auto exact = with_length(2, "{}");
  CHECK(safetensors::parse_header(std::as_bytes(std::span(exact)), {}).ok());
  // A 0 dim beside one of exactly max_tensor_elements (an empty tensor) is
  // read; one more is refused.
  safetensors::HeaderLimits elements;
  elements.max_tensor_elements = 10;
  for (const int d : {10, 11}) {
    CAPTURE(d);
    const auto empty = raw("{" + t("a", "F32", "[0," + std::to_string(d) + "]", "[0,0]") + "}");
    auto r = safetensors::parse_header(std::as_bytes(std::span(empty)), elements);
    CHECK(r.ok() == (d == 10));
    if (d == 11)
      CHECK_MESSAGE(
          r.error().message.find("a dim of 11, more than LoadOptions::max_tensor_elements (10)") != std::string::npos,
          r.error().message);
  }
}

TEST_CASE("what the reference accepts, ballast accepts: trailing spaces, unknown fields, empty tensors") {
  const std::string json = "{" + t("a", "U8", "[2]", "[0,2]") + "," + t("empty", "F32", "[0,5]", "[2,2]") +
                           R"(,"b":{"dtype":"I16","shape":[],"data_offsets":[2,4],"extra":{"n":[1,[2]]}}})" + "    ";
  const auto file = raw(json, 4);
  auto r = safetensors::parse_header(std::as_bytes(std::span(file)), {});
  REQUIRE_MESSAGE(r.ok(), r.error().to_string());
  REQUIRE(r->tensors.size() == 3);
  CHECK(r->tensors[0].name == "a");
  CHECK(r->tensors[1].name == "empty");  // zero bytes at 2, ordered before b's [2, 4)
  CHECK(r->tensors[2].shape.empty());    // a scalar
  CHECK(r->buffer_start == 8 + json.size());
}

TEST_CASE("caps: a million tiny tensors, huge metadata") {
  SUBCASE("more tensors than max_tensors_per_file stop the parse at the cap") {
    auto tiny_tensors = [](int n) {
      std::string json = "{";
      json.reserve(static_cast<std::size_t>(n) * 52);
      for (int i = 0; i < n; ++i)
        json += (i ? "," : "") +
                t("t" + std::to_string(i), "U8", "[1]", "[" + std::to_string(i) + "," + std::to_string(i + 1) + "]");
      json += "}";
      return raw(json, static_cast<std::size_t>(n));
    };
    const int n = 1'000'000;
    const auto file = tiny_tensors(n);
    const auto start = std::chrono::steady_clock::now();
    std::optional<Result<safetensors::Header>> parsed;
    const std::size_t heap = peak_growth([&] { parsed.emplace(safetensors::parse_header(std::as_bytes(std::span(file)), {})); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(seconds < kTimeBound);
    CHECK(heap < kMemoryBound);
    auto& r = *parsed;
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == ErrorCode::overflow);
    CHECK(r.error().message.find("max_tensors_per_file") != std::string::npos);
    // A raised cap admits what the default refuses: one tensor past the
    // default, under a cap of exactly that many, opens whole (a file of
    // cap + 1 rather than the million: under the asan preset's -O0 parsing
    // the million whole took most of this test's 70 s, and proved no more).
    const safetensors::HeaderLimits defaults;
    const int past = static_cast<int>(defaults.max_tensors) + 1;
    const auto just_past = tiny_tensors(past);
    auto refused = safetensors::parse_header(std::as_bytes(std::span(just_past)), defaults);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::overflow);
    safetensors::HeaderLimits wide;
    wide.max_tensors = static_cast<std::uint32_t>(past);
    auto all = safetensors::parse_header(std::as_bytes(std::span(just_past)), wide);
    REQUIRE_MESSAGE(all.ok(), all.error().to_string());
    CHECK(all->tensors.size() == static_cast<std::size_t>(past));
  }
  SUBCASE("metadata of 20 MB (past the 16 MiB cap): refused before the parser holds it, read under a raised cap") {
    const std::string big(20'000'000, 'x');
    const auto file = raw(R"({"__metadata__":{"k":")" + big + "\"}}");
    std::optional<Result<safetensors::Header>> parsed;
    const std::size_t heap = peak_growth([&] { parsed.emplace(safetensors::parse_header(std::as_bytes(std::span(file)), {})); });
    CHECK(heap < kMemoryBound);
    REQUIRE_FALSE(parsed->ok());
    CHECK(parsed->error().code == ErrorCode::overflow);
    CHECK(parsed->error().message.find("max_metadata_bytes") != std::string::npos);
    CHECK(parsed->error().offset == 8 + 21);  // the value's opening quote
    // Many values under the per-string cap add up past it too.
    std::string many = R"({"__metadata__":{)";
    for (int i = 0; i < 40; ++i) many += (i ? "," : "") + json_quoted("k" + std::to_string(i)) + ":" + json_quoted(std::string(500'000, 'v'));
    const auto many_file = raw(many + "}}");
    auto summed = safetensors::parse_header(std::as_bytes(std::span(many_file)), {});
    REQUIRE_FALSE(summed.ok());
    CHECK(summed.error().message.find("__metadata__ holds more than") != std::string::npos);
    safetensors::HeaderLimits wide;
    wide.max_metadata_bytes = 100'000'000;
    auto r = safetensors::parse_header(std::as_bytes(std::span(file)), wide);
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    CHECK(r->metadata.at(0).second.size() == big.size());
    safetensors::HeaderLimits small;
    small.max_header_bytes = 1'000'000;
    auto refused = safetensors::parse_header(std::as_bytes(std::span(file)), small);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::overflow);
  }
}

TEST_CASE("hostile indexes") {
  struct IndexCase {
    const char* what;
    std::string json;
    ErrorCode code;
    const char* says;
    const char* tensor = "";
  };
  const IndexCase cases[] = {
      {"not an object", "[]", ErrorCode::malformed, "not a JSON object"},
      {"no weight_map", "{}", ErrorCode::malformed, "has no weight_map"},
      {"weight_map twice", R"({"weight_map":{},"weight_map":{}})", ErrorCode::malformed, "appears twice"},
      {"a tensor twice", R"({"weight_map":{"a":"x","a":"y"}})", ErrorCode::malformed, "appears twice", "a"},
      {"a shard that is not a string", R"({"weight_map":{"a":3}})", ErrorCode::malformed, "not a shard file", "a"},
      {"weight_map not an object", R"({"weight_map":["a"]})", ErrorCode::malformed, "not an object"},
      {"not UTF-8", "{\"weight_map\":{\"\xfe\":\"x\"}}", ErrorCode::malformed, "not valid UTF-8"},
      {"deep nesting", "{\"x\":" + std::string(200, '[') + std::string(200, ']') + ",\"weight_map\":{}}",
       ErrorCode::malformed, "deeper than"},
      {"not JSON", R"({"weight_map":{"a":"x",}})", ErrorCode::malformed, "not valid JSON"},
      {"a NUL, then a second weight_map", std::string("{\"weight_map\":{}}\0{\"weight_map\":{\"a\":\"x\"}}", 42),
       ErrorCode::malformed, "a NUL byte"},
  };
  for (const IndexCase& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    std::optional<Result<safetensors::IndexFile>> parsed;
    CHECK(peak_growth([&] { parsed.emplace(safetensors::parse_index(c.json, 1000)); }) < kMemoryBound);
    auto& r = *parsed;
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == c.code);
    CHECK_MESSAGE(r.error().message.find(c.says) != std::string::npos, r.error().message);
    CHECK(r.error().tensor == c.tensor);
  }
  std::string many = "{\"weight_map\":{";
  for (int i = 0; i < 2000; ++i) many += (i ? "," : "") + json_quoted("t" + std::to_string(i)) + ":\"s\"";
  auto capped = safetensors::parse_index(many + "}}", 1000);
  REQUIRE_FALSE(capped.ok());
  CHECK(capped.error().code == ErrorCode::overflow);
}

TEST_CASE("an index that ends before its size is an io error, not a wait") {
  // The size is the index's fstat; the file shrinking before it is read
  // leaves pread returning 0 at its new end.
  ScratchDir dir("st-index-shrunk");
  const auto path = dir.write("model.safetensors.index.json", std::string(R"({"weight_map": {}})"));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  auto whole = safetensors::read_index_text(fd, 18, 64, "x.json");
  REQUIRE(whole.ok());
  CHECK(*whole == R"({"weight_map": {}})");
  auto shrunk = safetensors::read_index_text(fd, 19, 64, "x.json");
  REQUIRE_FALSE(shrunk.ok());
  CHECK(shrunk.error().code == ErrorCode::io);
  CHECK(shrunk.error().message.find("ended early") != std::string::npos);
  CHECK(shrunk.error().file == "x.json");
  auto over = safetensors::read_index_text(fd, 18, 17, "x.json");
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == ErrorCode::overflow);
  auto at_cap = safetensors::read_index_text(fd, 18, 18, "x.json");  // the cap is the largest index read
  REQUIRE_MESSAGE(at_cap.ok(), at_cap.error().to_string());
  CHECK(*at_cap == R"({"weight_map": {}})");
  auto closed = safetensors::read_index_text(-1, 18, 64, "x.json");
  REQUIRE_FALSE(closed.ok());
  CHECK(closed.error().code == ErrorCode::io);
  CHECK(closed.error().message.find("reading the index") != std::string::npos);
  ::close(fd);
}
