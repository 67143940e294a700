// Writing GGUF files for the tests, straight from the specification: the
// header, key/value pairs, tensor infos, zero padding to the alignment, the
// data section. Pieces are byte strings, so a test can write any field
// wrong on purpose.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ballast::testing {

using GgufBytes = std::vector<std::uint8_t>;

// GGUF metadata value types.
enum GgufValue : std::uint32_t {
  kGU8 = 0, kGI8, kGU16, kGI16, kGU32, kGI32, kGF32, kGBool, kGString, kGArray, kGU64, kGI64, kGF64
};
// ggml type ids used by the tests.
enum GgmlType : std::uint32_t { kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14, kF64 = 28 };

inline void le(GgufBytes& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
inline void append(GgufBytes& a, const GgufBytes& b) { a.insert(a.end(), b.begin(), b.end()); }
inline GgufBytes operator+(GgufBytes a, const GgufBytes& b) {
  append(a, b);
  return a;
}
inline GgufBytes u32(std::uint64_t v) {
  GgufBytes o;
  le(o, v, 4);
  return o;
}
inline GgufBytes u64(std::uint64_t v) {
  GgufBytes o;
  le(o, v, 8);
  return o;
}
inline GgufBytes bytes_of(const std::string& s) { return GgufBytes(s.begin(), s.end()); }
// A GGUF string: u64 length, then the bytes.
inline GgufBytes gstr(const std::string& s) { return u64(s.size()) + bytes_of(s); }

// One key/value pair whose value bytes are given.
inline GgufBytes kv(const std::string& key, std::uint32_t type, const GgufBytes& value) {
  return gstr(key) + u32(type) + value;
}
inline GgufBytes kv_u32(const std::string& key, std::uint32_t v) { return kv(key, kGU32, u32(v)); }
inline GgufBytes kv_str(const std::string& key, const std::string& v) { return kv(key, kGString, gstr(v)); }
// An array value: element type, count, the elements' bytes.
inline GgufBytes array(std::uint32_t element, std::uint64_t count, const GgufBytes& elements) {
  return u32(element) + u64(count) + elements;
}

// One tensor info: name, n_dims, ne (innermost first), type, offset.
inline GgufBytes tinfo(const std::string& name, const std::vector<std::uint64_t>& ne, std::uint32_t type,
                       std::uint64_t offset) {
  GgufBytes o = gstr(name) + u32(ne.size());
  for (std::uint64_t d : ne) le(o, d, 8);
  return o + u32(type) + u64(offset);
}

// The 24-byte header.
inline GgufBytes ghead(std::uint64_t tensors, std::uint64_t kvs, std::uint32_t version = 3) {
  return bytes_of("GGUF") + u32(version) + u64(tensors) + u64(kvs);
}

// A whole file: header, `kvs`, `infos`, zeros to `alignment`, then `data`
// bytes of a pattern (counting up from 1).
inline GgufBytes gguf_file(const std::vector<GgufBytes>& kvs, const std::vector<GgufBytes>& infos, std::size_t data,
                           std::size_t alignment = 32, std::uint32_t version = 3) {
  GgufBytes out = ghead(infos.size(), kvs.size(), version);
  for (const auto& k : kvs) append(out, k);
  for (const auto& t : infos) append(out, t);
  while (out.size() % alignment != 0) out.push_back(0);
  for (std::size_t i = 0; i < data; ++i) out.push_back(static_cast<std::uint8_t>(i + 1));
  return out;
}

}  // namespace ballast::testing
