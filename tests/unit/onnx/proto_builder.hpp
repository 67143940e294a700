// A tiny protobuf wire-format writer for tests: builds ONNX messages (and
// deliberately broken ones) byte by byte, independent of the decoder.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ballast::testing {

class Proto {
 public:
  std::vector<std::uint8_t> data;

  static void put_varint(std::vector<std::uint8_t>& out, std::uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<std::uint8_t>(v | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<std::uint8_t>(v));
  }
  Proto& tag(std::uint32_t field, unsigned wire_type) {
    put_varint(data, (std::uint64_t{field} << 3) | wire_type);
    return *this;
  }
  Proto& varint(std::uint32_t field, std::uint64_t v) {
    tag(field, 0);
    put_varint(data, v);
    return *this;
  }
  Proto& sint(std::uint32_t field, std::int64_t v) { return varint(field, static_cast<std::uint64_t>(v)); }
  Proto& fixed32(std::uint32_t field, std::uint32_t v) {
    tag(field, 5);
    for (int i = 0; i < 4; ++i) data.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  Proto& fixed64(std::uint32_t field, std::uint64_t v) {
    tag(field, 1);
    for (int i = 0; i < 8; ++i) data.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  Proto& f32(std::uint32_t field, float f) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return fixed32(field, bits);
  }
  Proto& bytes(std::uint32_t field, std::span<const std::uint8_t> b) {
    tag(field, 2);
    put_varint(data, b.size());
    data.insert(data.end(), b.begin(), b.end());
    return *this;
  }
  Proto& str(std::uint32_t field, std::string_view s) {
    return bytes(field, std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()));
  }
  Proto& msg(std::uint32_t field, const Proto& m) { return bytes(field, m.data); }
  Proto& packed_varints(std::uint32_t field, std::initializer_list<std::int64_t> values) {
    std::vector<std::uint8_t> payload;
    for (auto v : values) put_varint(payload, static_cast<std::uint64_t>(v));
    return bytes(field, payload);
  }
  Proto& packed_u64(std::uint32_t field, const std::vector<std::uint64_t>& values) {
    std::vector<std::uint8_t> payload;
    for (auto v : values) put_varint(payload, v);
    return bytes(field, payload);
  }
  Proto& packed_floats(std::uint32_t field, std::initializer_list<float> values) {
    std::vector<std::uint8_t> payload(values.size() * 4);
    std::memcpy(payload.data(), std::data(values), payload.size());
    return bytes(field, payload);
  }
  Proto& packed_doubles(std::uint32_t field, std::initializer_list<double> values) {
    std::vector<std::uint8_t> payload(values.size() * 8);
    std::memcpy(payload.data(), std::data(values), payload.size());
    return bytes(field, payload);
  }
  Proto& raw(std::initializer_list<std::uint8_t> b) {
    data.insert(data.end(), b.begin(), b.end());
    return *this;
  }
  std::span<const std::byte> span() const { return std::as_bytes(std::span<const std::uint8_t>(data)); }
};

// ONNX message builders (field numbers from onnx.proto).
namespace onnx_proto {

inline Proto tensor(std::string_view name, int dtype, std::initializer_list<std::int64_t> dims) {
  Proto t;
  if (dims.size() != 0) t.packed_varints(1, dims);
  t.varint(2, static_cast<std::uint64_t>(dtype));
  if (!name.empty()) t.str(8, name);
  return t;
}

inline Proto& raw_data(Proto& t, std::vector<std::uint8_t> bytes) { return t.bytes(9, bytes); }

inline Proto& external(Proto& t, std::initializer_list<std::pair<std::string_view, std::string_view>> entries) {
  for (auto [k, v] : entries) {
    Proto e;
    e.str(1, k).str(2, v);
    t.msg(13, e);
  }
  return t.varint(14, 1);
}

inline Proto attribute_int(std::string_view name, std::int64_t v) {
  Proto a;
  a.str(1, name).sint(3, v).varint(20, 2);
  return a;
}
// An INTS attribute (a Transpose's perm); `packed` writes one packed run,
// else one varint field per value (both are valid protobuf).
inline Proto attribute_ints(std::string_view name, std::initializer_list<std::int64_t> v, bool packed = true) {
  Proto a;
  a.str(1, name);
  if (packed)
    a.packed_varints(8, v);
  else
    for (std::int64_t x : v) a.sint(8, x);
  a.varint(20, 7);
  return a;
}
inline Proto attribute_tensor(std::string_view name, const Proto& t) {
  Proto a;
  a.str(1, name).msg(5, t).varint(20, 4);
  return a;
}
inline Proto attribute_graph(std::string_view name, const Proto& g) {
  Proto a;
  a.str(1, name).msg(6, g).varint(20, 5);
  return a;
}

// A node named `name`; an empty name writes no name field at all, as
// onnx.helper and many exporters do.
inline Proto named_node(std::string_view name, std::string_view op, std::initializer_list<std::string_view> inputs,
                        std::initializer_list<std::string_view> outputs, std::initializer_list<Proto> attributes = {},
                        std::string_view domain = {}) {
  Proto n;
  for (auto i : inputs) n.str(1, i);
  for (auto o : outputs) n.str(2, o);
  if (!name.empty()) n.str(3, name);
  n.str(4, op);
  for (const auto& a : attributes) n.msg(5, a);
  if (!domain.empty()) n.str(7, domain);
  return n;
}

// A node named "<op>_node".
inline Proto node(std::string_view op, std::initializer_list<std::string_view> inputs,
                  std::initializer_list<std::string_view> outputs, std::initializer_list<Proto> attributes = {},
                  std::string_view domain = {}) {
  return named_node(std::string(op) + "_node", op, inputs, outputs, attributes, domain);
}

inline Proto graph(std::initializer_list<Proto> nodes, std::initializer_list<Proto> initializers) {
  Proto g;
  for (const auto& n : nodes) g.msg(1, n);
  g.str(2, "g");
  for (const auto& t : initializers) g.msg(5, t);
  return g;
}

inline Proto model(const Proto& graph) {
  Proto opset;
  opset.str(1, "").varint(2, 17);
  Proto m;
  m.varint(1, 8).str(2, "ballast-test").msg(8, opset).msg(7, graph);
  return m;
}

}  // namespace onnx_proto
}  // namespace ballast::testing
