// Writing safetensors files for the tests, straight from the specification:
// an 8-byte little-endian header length, the JSON header, the byte buffer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ballast::testing {

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "F6_E2M3", ...
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> bytes;
};

inline std::string json_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The header JSON for `tensors` laid out back to back in the given order,
// plus `metadata` (written when not empty).
inline std::string st_header_json(const std::vector<StTensor>& tensors,
                                  const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  std::string json = "{";
  bool first = true;
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata.size(); ++i)
      json += (i ? "," : "") + json_quoted(metadata[i].first) + ":" + json_quoted(metadata[i].second);
    json += "}";
    first = false;
  }
  std::uint64_t at = 0;
  for (const StTensor& t : tensors) {
    json += first ? "" : ",";
    first = false;
    json += json_quoted(t.name) + ":{\"dtype\":" + json_quoted(t.dtype) + ",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) json += (i ? "," : "") + std::to_string(t.shape[i]);
    json += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + t.bytes.size()) + "]}";
    at += t.bytes.size();
  }
  return json + "}";
}

// A whole file: length, `json`, then `buffer`.
inline std::vector<std::uint8_t> st_file_raw(const std::string& json, const std::vector<std::uint8_t>& buffer) {
  std::vector<std::uint8_t> out(8);
  const std::uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
  out.insert(out.end(), json.begin(), json.end());
  out.insert(out.end(), buffer.begin(), buffer.end());
  return out;
}

inline std::vector<std::uint8_t> st_buffer(const std::vector<StTensor>& tensors) {
  std::vector<std::uint8_t> buffer;
  for (const StTensor& t : tensors) buffer.insert(buffer.end(), t.bytes.begin(), t.bytes.end());
  return buffer;
}

inline std::vector<std::uint8_t> st_file(const std::vector<StTensor>& tensors,
                                         const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  return st_file_raw(st_header_json(tensors, metadata), st_buffer(tensors));
}

// `n` bytes i*seed+1, recognisable when sliced.
inline std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed = 7) {
  std::vector<std::uint8_t> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(i * seed + 1);
  return b;
}

}  // namespace ballast::testing
