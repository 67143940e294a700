// The hostile table for GGUF headers: every refusal docs/sources.md lists,
// each a typed error naming the field (and the tensor, when it is about
// one) at a file offset, in bounded time and memory; and the caps, exact to
// the byte.
#include "gguf/header.hpp"
#include "support/counting_new.hpp"
#include "unit/gguf/writer.hpp"
#include "unit/store/scratch_dir.hpp"

#include <ballast/model.hpp>
#include <doctest/doctest.h>

#include <chrono>

using namespace ballast;
using namespace ballast::testing;

namespace {

Bytes as_file(const GgufBytes& b) { return std::as_bytes(std::span(b)); }

struct Case {
  const char* what;
  GgufBytes file;
  ErrorCode code;
  const char* says;         // a phrase of the message
  const char* tensor = "";  // Error::tensor, when the refusal is about one
  gguf::HeaderLimits limits = {};
};

const GgufBytes kOk = kv_u32("general.alignment", 32);
GgufBytes nested(unsigned depth) {
  // depth arrays, each holding the next; the innermost holds no elements.
  GgufBytes v = array(kGU8, 0, {});
  for (unsigned i = 1; i < depth; ++i) v = array(kGArray, 1, v);
  return v;
}

std::vector<Case> cases() {
  std::vector<Case> c;
  const GgufBytes f32_a = tinfo("a", {16}, kF32, 0);
  c.push_back({"shorter than the header", bytes_of("GGUF") + u32(3) + u32(0), ErrorCode::out_of_bounds,
               "ends inside the 24-byte GGUF header"});
  c.push_back({"version 1", ghead(0, 0, 1), ErrorCode::unsupported, "GGUF version 1"});
  c.push_back({"a big-endian file", ghead(0, 0, 3u << 24), ErrorCode::unsupported, "big-endian"});
  c.push_back({"version 0", ghead(0, 0, 0), ErrorCode::unsupported, "GGUF version 0"});
  c.push_back({"version 4", ghead(0, 0, 4), ErrorCode::unsupported, "GGUF version 4"});
  c.push_back({"a tensor count past the cap", ghead(std::uint64_t{1} << 40, 0), ErrorCode::overflow,
               "LoadOptions::max_tensors_per_file"});
  c.push_back({"a tensor count of all ones", ghead(UINT64_MAX, 0), ErrorCode::overflow, "max_tensors_per_file"});
  c.push_back({"a metadata count past the cap", ghead(0, std::uint64_t{1} << 63), ErrorCode::overflow,
               "LoadOptions::max_gguf_metadata_entries"});
  c.push_back({"counts that cannot fit in the file", ghead(1000, 1000) + kOk, ErrorCode::out_of_bounds, "cannot fit"});
  c.push_back({"a key longer than the specification allows", ghead(0, 1) + u64(65536) + GgufBytes(65536, 'k') + u32(0) +
                                                                 GgufBytes{1},
               ErrorCode::overflow, "cap on keys"});
  c.push_back({"a key length past the end", ghead(0, 1) + u64(60000) + bytes_of("general") + u32(0) + GgufBytes(2),
               ErrorCode::out_of_bounds, "file ends inside a metadata key"});
  c.push_back({"an empty key", ghead(0, 1) + kv("", kGU8, {1}), ErrorCode::malformed, "a metadata key is empty"});
  c.push_back({"a key that is not UTF-8", ghead(0, 1) + kv("k\xff", kGU8, {1}), ErrorCode::malformed, "not UTF-8"});
  c.push_back({"a key twice", ghead(0, 2) + kv("k", kGU8, {1}) + kv("k", kGU8, {2}), ErrorCode::malformed,
               "appears twice"});
  c.push_back({"an unknown value type", ghead(0, 1) + kv("k", 13, u64(0)), ErrorCode::malformed, "value type 13"});
  c.push_back({"a value cut off", ghead(0, 1) + kv("k", kGU64, u32(0)), ErrorCode::out_of_bounds, "uint64 value"});
  c.push_back({"a string value over the cap", ghead(0, 1) + kv("k", kGString, u64(std::uint64_t{1} << 40)),
               ErrorCode::overflow, "LoadOptions::max_metadata_bytes"});
  c.push_back({"a string value past the end", ghead(0, 1) + kv("k", kGString, u64(100) + bytes_of("short")),
               ErrorCode::out_of_bounds, "string value"});
  c.push_back({"a string value that is not UTF-8", ghead(0, 1) + kv_str("k", "\xc0\xaf"), ErrorCode::malformed,
               "not UTF-8"});
  c.push_back({"a bool of 2", ghead(0, 1) + kv("k", kGBool, {2}), ErrorCode::malformed, "neither 0 nor 1"});
  c.push_back({"an array count past the cap", ghead(0, 1) + kv("k", kGArray, array(kGU8, std::uint64_t{1} << 30, {})),
               ErrorCode::overflow, "LoadOptions::max_gguf_array_elements"});
  c.push_back({"an array that cannot fit", ghead(0, 1) + kv("k", kGArray, array(kGU32, 1000000, u32(1))),
               ErrorCode::out_of_bounds, "cannot fit"});
  c.push_back({"an array of an unknown type", ghead(0, 1) + kv("k", kGArray, array(99, 1, {0})), ErrorCode::malformed,
               "array element type 99"});
  c.push_back({"arrays nested past the cap", ghead(0, 1) + kv("k", kGArray, nested(9)), ErrorCode::malformed,
               "nest deeper than 8"});
  c.push_back({"a string element past the end",
               ghead(0, 1) + kv("k", kGArray, array(kGString, 2, gstr("a") + u64(1000) + bytes_of("b"))),
               ErrorCode::out_of_bounds, "string value"});
  c.push_back({"a string element over the cap",
               ghead(0, 1) + kv("k", kGArray, array(kGString, 1, u64(std::uint64_t{1} << 50))), ErrorCode::overflow,
               "max_metadata_bytes"});
  c.push_back({"a bool element of 7", ghead(0, 1) + kv("k", kGArray, array(kGBool, 3, {0, 1, 7})),
               ErrorCode::malformed, "bool array element 2"});
  c.push_back({"alignment 0", ghead(0, 1) + kv_u32("general.alignment", 0), ErrorCode::malformed,
               "not a power of two"});
  c.push_back({"alignment 48", ghead(0, 1) + kv_u32("general.alignment", 48), ErrorCode::malformed,
               "not a power of two"});
  c.push_back({"alignment as a uint64", ghead(0, 1) + kv("general.alignment", kGU64, u64(32)), ErrorCode::malformed,
               "must be a uint32"});
  c.push_back({"split.no not below split.count",
               ghead(0, 2) + kv("split.no", kGU16, {2, 0}) + kv("split.count", kGU16, {2, 0}), ErrorCode::malformed,
               "is not below split.count"});
  c.push_back({"split.no without split.count", ghead(0, 1) + kv("split.no", kGU16, {1, 0}), ErrorCode::malformed,
               "split.no 1 without split.count"});
  c.push_back({"a negative split.count", ghead(0, 1) + kv("split.count", kGI32, u32(0xffffffff)), ErrorCode::malformed,
               "is negative"});
  c.push_back({"split.count as a string", ghead(0, 1) + kv_str("split.count", "2"), ErrorCode::malformed,
               "must be an integer"});
  c.push_back({"a tensor name over 64 bytes", ghead(1, 0) + tinfo(std::string(65, 'n'), {1}, kF32, 0),
               ErrorCode::overflow, "cap on tensor names"});
  c.push_back({"an empty tensor name", ghead(1, 0) + tinfo("", {1}, kF32, 0), ErrorCode::malformed,
               "a tensor name is empty"});
  c.push_back({"a tensor name that is not UTF-8", ghead(1, 0) + tinfo("\xed\xa0\x80", {1}, kF32, 0),
               ErrorCode::malformed, "not UTF-8"});
  c.push_back({"a tensor name holding a NUL", ghead(1, 0) + tinfo(std::string("a\0x", 3), {1}, kF32, 0),
               ErrorCode::malformed, "NUL byte (byte 1); C callers would read it as 'a'"});
  c.push_back({"a tensor twice", gguf_file({}, {f32_a, tinfo("a", {16}, kF32, 64)}, 128), ErrorCode::malformed,
               "two tensors have this name", "a"});
  c.push_back({"n_dims 5", ghead(1, 0) + tinfo("a", {1, 1, 1, 1, 1}, kF32, 0), ErrorCode::malformed, "at most 4", "a"});
  c.push_back({"a negative dimension", ghead(1, 0) + tinfo("a", {std::uint64_t{1} << 63}, kF32, 0),
               ErrorCode::malformed, "negative as int64", "a"});
  c.push_back({"a dimension product that overflows", ghead(1, 0) + tinfo("a", {1u << 31, 1u << 31, 1u << 31}, kF32, 0),
               ErrorCode::overflow, "product of the dims overflows", "a"});
  c.push_back({"a dimension product that wraps to a small number",
               ghead(1, 0) + tinfo("a", {std::uint64_t{1} << 32, std::uint64_t{1} << 32, 2}, kF32, 0),
               ErrorCode::overflow, "product of the dims overflows", "a"});
  c.push_back({"elements past the cap", ghead(1, 0) + tinfo("a", {std::uint64_t{1} << 41}, kF32, 0),
               ErrorCode::overflow, "LoadOptions::max_tensor_elements", "a"});
  // No elements, so the count bounds nothing: planned, its transpose's
  // sizes overflowed (found by fuzz_open_model).
  c.push_back({"a dimension past the cap beside a 0", ghead(1, 0) + tinfo("a", {0, std::uint64_t{1} << 62}, kF32, 0),
               ErrorCode::overflow, "ne[1] is 4611686018427387904, more than LoadOptions::max_tensor_elements", "a"});
  c.push_back({"a removed type id", ghead(1, 0) + tinfo("a", {32}, 4, 0), ErrorCode::unsupported, "tensor type id 4",
               "a"});
  c.push_back({"an unknown type id", ghead(1, 0) + tinfo("a", {32}, 40, 0), ErrorCode::unsupported,
               "tensor type id 40", "a"});
  c.push_back({"ne[0] not a multiple of the block", ghead(1, 0) + tinfo("a", {128, 2}, kQ4_K, 0), ErrorCode::malformed,
               "not a multiple of Q4_K's block of 256", "a"});
  c.push_back({"ne[0] one short of a block", ghead(1, 0) + tinfo("a", {31}, kQ4_0, 0), ErrorCode::malformed,
               "not a multiple of Q4_0's block of 32", "a"});
  gguf::HeaderLimits any_size;
  any_size.max_tensor_elements = UINT64_MAX;
  c.push_back({"a byte size that overflows", ghead(1, 0) + tinfo("a", {std::uint64_t{1} << 62}, kF64, 0),
               ErrorCode::overflow, "byte size overflows", "a", any_size});
  c.push_back({"an offset off the alignment", gguf_file({}, {tinfo("a", {4}, kF32, 8)}, 64), ErrorCode::malformed,
               "not a multiple of the alignment (32)", "a"});
  c.push_back({"an offset off a larger alignment",
               gguf_file({kv_u32("general.alignment", 64)}, {tinfo("a", {4}, kF32, 32)}, 128, 64), ErrorCode::malformed,
               "not a multiple of the alignment (64)", "a"});
  c.push_back({"a tensor past the end", gguf_file({}, {tinfo("a", {64}, kF32, 0)}, 255), ErrorCode::out_of_bounds,
               "run past the end of the file", "a"});
  c.push_back({"a tensor one byte past the end", gguf_file({}, {tinfo("a", {4}, kF32, 0)}, 15),
               ErrorCode::out_of_bounds, "run past the end", "a"});
  c.push_back({"an offset at 2^64", gguf_file({}, {tinfo("a", {4}, kF32, UINT64_MAX - 31)}, 16), ErrorCode::overflow,
               "end overflows", "a"});
  c.push_back({"overlapping tensors", gguf_file({}, {tinfo("a", {16}, kF32, 0), tinfo("b", {16}, kF32, 32)}, 128),
               ErrorCode::malformed, "overlap tensor 'a'", "b"});
  c.push_back({"two tensors on one range", gguf_file({}, {tinfo("a", {8}, kF32, 0), tinfo("b", {8}, kF32, 0)}, 32),
               ErrorCode::malformed, "overlap", "b"});
  c.push_back({"a tensor inside another, listed first",
               gguf_file({}, {tinfo("small", {8}, kF32, 32), tinfo("big", {64}, kF32, 0)}, 256), ErrorCode::malformed,
               "overlap tensor 'big'", "small"});
  {
    GgufBytes f = gguf_file({}, {f32_a}, 64);
    f[ghead(1, 0).size() + f32_a.size() + 1] = 9;  // a padding byte
    c.push_back({"padding that is not zero", f, ErrorCode::malformed, "padding before the data section is not zero"});
  }
  c.push_back({"a file ending inside a tensor info", ghead(1, 0) + gstr("a") + u32(2) + u64(4) + u64(4),
               ErrorCode::out_of_bounds,
               "dims, type and offset", "a"});
  c.push_back({"a file ending inside the key/value pairs", ghead(0, 2) + kv_u32("a", 1) + gstr("b"),
               ErrorCode::out_of_bounds, "'b''s value type"});
  return c;
}

}  // namespace

TEST_CASE("hostile GGUF headers: each refused with a typed error, in bounded time and memory") {
  for (const Case& c : cases()) {
    const std::string what = c.what;
    CAPTURE(what);
    Result<gguf::Header> r = gguf::Header{};
    const auto start = std::chrono::steady_clock::now();
    const std::size_t heap = peak_growth([&] { r = gguf::parse_header(as_file((c.file)), c.limits); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(seconds < kTimeBound);
    CHECK(heap < kMemoryBound);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == c.code);
    CHECK_MESSAGE(r.error().message.find(c.says) != std::string::npos, r.error().message);
    CHECK(r.error().tensor == c.tensor);
    CHECK(r.error().offset.has_value());
    CHECK(r.error().offset.value_or(UINT64_MAX) <= c.file.size());
  }
}

TEST_CASE("the same refusals through open_model name the file") {
  ScratchDir dir("gguf-hostile-files");
  int i = 0;
  for (const Case& c : cases()) {
    if (c.limits.max_tensor_elements != gguf::HeaderLimits{}.max_tensor_elements) continue;
    const std::string what = c.what;
    CAPTURE(what);
    const auto path = dir.write("case" + std::to_string(i++) + ".gguf", c.file);
    auto r = open_model(path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == c.code);
    CHECK(r.error().file.find(path.filename().string()) != std::string::npos);
  }
}

TEST_CASE("the caps are exact: at the cap is read, one more is not") {
  // A string value of exactly max_string_bytes (with its key counted in the
  // kept total, so the cap is the key plus the value).
  const GgufBytes file = ghead(0, 1) + kv_str("k", "0123456789");
  gguf::HeaderLimits at_cap;
  at_cap.max_string_bytes = 11;  // "k" + 10 bytes
  CHECK(gguf::parse_header(as_file((file)), at_cap).ok());
  gguf::HeaderLimits below = at_cap;
  below.max_string_bytes = 10;
  auto r = gguf::parse_header(as_file((file)), below);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::overflow);
  // A tensor name of exactly 64 bytes.
  CHECK(gguf::parse_header(as_file((gguf_file({}, {tinfo(std::string(64, 'n'), {4}, kF32, 0)}, 16))), {})
            .ok());
  // Arrays: exactly the element cap, and nesting exactly 8 deep.
  gguf::HeaderLimits arrays;
  arrays.max_array_elements = 3;
  CHECK(gguf::parse_header(as_file((ghead(0, 1) + kv("k", kGArray, array(kGU8, 3, {1, 2, 3})))), arrays)
            .ok());
  CHECK(gguf::parse_header(as_file((ghead(0, 1) + kv("k", kGArray, array(kGU8, 4, {1, 2, 3, 4})))),
                           arrays)
            .error()
            .code == ErrorCode::overflow);
  CHECK(gguf::parse_header(as_file((ghead(0, 1) + kv("k", kGArray, nested(8)))), {}).ok());
  // Counts: exactly the cap.
  gguf::HeaderLimits counts;
  counts.max_tensors = 1;
  counts.max_metadata_entries = 1;
  CHECK(gguf::parse_header(as_file((gguf_file({kOk}, {tinfo("a", {16}, kF32, 0)}, 64))), counts).ok());
  CHECK(gguf::parse_header(as_file((gguf_file({kOk, kv_u32("b", 1)}, {}, 0))), counts).error().code ==
        ErrorCode::overflow);
  // A tensor that ends exactly at the end of the file.
  CHECK(gguf::parse_header(as_file((gguf_file({}, {tinfo("a", {4}, kF32, 0)}, 16))), {}).ok());
  // A 0 dim beside one of exactly max_tensor_elements (an empty tensor) is
  // read; one more is refused, located at that ne's own 8 bytes.
  gguf::HeaderLimits elements;
  elements.max_tensor_elements = 10;
  CHECK(gguf::parse_header(as_file((gguf_file({}, {tinfo("a", {0, 10}, kF32, 0)}, 0))), elements).ok());
  auto past = gguf::parse_header(as_file((gguf_file({}, {tinfo("a", {0, 11}, kF32, 0)}, 0))), elements);
  REQUIRE_FALSE(past.ok());
  CHECK(past.error().code == ErrorCode::overflow);
  CHECK_MESSAGE(
      past.error().message.find("ne[1] is 11, more than LoadOptions::max_tensor_elements (10)") != std::string::npos,
      past.error().message);
  // The 24-byte header, the name (8 + 1), n_dims (4), then ne[0] (8).
  CHECK(past.error().offset == std::uint64_t{24 + 9 + 4 + 8});
}

TEST_CASE("split keys of a signed type: zero and positive values are read, a negative one is not") {
  // Writers may store split.no as any integer type; 0 (the first shard) is
  // not negative, whatever its width.
  for (const std::uint8_t type : {kGI8, kGI16, kGI32, kGI64}) {
    CAPTURE(static_cast<int>(type));
    const std::size_t width = type == kGI8 ? 1 : type == kGI16 ? 2 : type == kGI32 ? 4 : 8;
    const GgufBytes zero(width, 0);
    GgufBytes two(width, 0);
    two[0] = 2;
    auto h = gguf::parse_header(as_file(ghead(0, 2) + kv("split.no", type, zero) + kv("split.count", type, two)), {});
    REQUIRE_MESSAGE(h.ok(), h.error().to_string());
    REQUIRE(h->split.has_value());
    CHECK(h->split->no == 0);
    CHECK(h->split->count == 2);
    const GgufBytes minus_one(width, 0xff);
    auto r = gguf::parse_header(as_file(ghead(0, 1) + kv("split.no", type, minus_one)), {});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("is negative (-1)") != std::string::npos);
  }
}

TEST_CASE("large but honest headers are read in bounded time and memory") {
  // 131,072 tensors (the cap), a 1,000,000-string array, arrays nested 8 deep.
  std::vector<GgufBytes> infos;
  for (int i = 0; i < 131072; ++i) infos.push_back(tinfo("t" + std::to_string(i), {0}, kF32, 0));
  GgufBytes strings;
  for (int i = 0; i < 1000000; ++i) append(strings, gstr(""));
  const GgufBytes file = gguf_file({kv("tokens", kGArray, array(kGString, 1000000, strings))}, infos, 0);
  gguf::Header h;
  const auto start = std::chrono::steady_clock::now();
  const std::size_t heap = peak_growth([&] {
    auto r = gguf::parse_header(as_file((file)), {});
    REQUIRE_MESSAGE(r.ok(), r.error().to_string());
    h = std::move(*r);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < kTimeBound * 2);
  CHECK(heap < kMemoryBound);
  CHECK(h.tensors.size() == 131072);
  REQUIRE(h.metadata.size() == 1);
  CHECK(h.metadata[0].type == "array[string]");
  CHECK(h.metadata[0].count == 1000000);
}
