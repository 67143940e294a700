#include "support/onnx_rewrite.hpp"

#include <optional>

namespace ballast::cli {
namespace {

enum class Kind { model, graph, node, attribute, tensor, sparse, training, function };

// The fields of each message on the walk that hold a message of the walk.
std::optional<Kind> child_kind(Kind parent, std::uint64_t field) {
  switch (parent) {
    case Kind::model:
      if (field == 7) return Kind::graph;
      if (field == 20) return Kind::training;
      if (field == 25) return Kind::function;
      break;
    case Kind::training:
      if (field == 1 || field == 2) return Kind::graph;
      break;
    case Kind::function:
      if (field == 7) return Kind::node;
      break;
    case Kind::graph:
      if (field == 1) return Kind::node;
      if (field == 5) return Kind::tensor;
      if (field == 15) return Kind::sparse;
      break;
    case Kind::node:
      if (field == 5) return Kind::attribute;
      break;
    case Kind::attribute:
      if (field == 5 || field == 10) return Kind::tensor;
      if (field == 6 || field == 11) return Kind::graph;
      if (field == 22 || field == 23) return Kind::sparse;
      break;
    case Kind::sparse:
      if (field == 1 || field == 2) return Kind::tensor;
      break;
    case Kind::tensor: break;
  }
  return std::nullopt;
}

// Deeper than any real model nests subgraphs; bounds the recursion.
constexpr int kMaxDepth = 512;

constexpr std::uint64_t kTensorName = 8, kTensorExternalData = 13, kTensorDataLocation = 14;

struct Field {
  std::uint64_t number = 0;
  unsigned type = 0;
  std::uint64_t value = 0;  // varint value
  std::size_t begin = 0;    // the key's first byte
  std::size_t payload = 0;  // a len field's payload
  std::size_t end = 0;      // one past the field's last byte
};

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void put_len_field(std::string& out, std::uint64_t number, std::string_view payload) {
  put_varint(out, (number << 3) | 2);
  put_varint(out, payload.size());
  out.append(payload);
}

class Rewriter {
 public:
  Rewriter(Bytes bytes, const ExternalRewrite& rewrite) : bytes_(bytes), rewrite_(rewrite) {}

  // Rewrites bytes [begin, end) as a message of `kind`; nullopt in `out`
  // when nothing in it changed (the caller copies it as it is).
  Status message(Kind kind, std::size_t begin, std::size_t end, int depth, std::optional<std::string>& out) {
    if (depth > kMaxDepth) return fail("messages nested deeper than " + std::to_string(kMaxDepth), begin);
    if (kind == Kind::tensor) return tensor(begin, end, out);
    std::string rebuilt;
    bool changed = false;
    std::size_t copied = begin;  // bytes before this are in `rebuilt` (when changed)
    for (std::size_t at = begin; at < end;) {
      Field f;
      BALLAST_RETURN_IF_ERROR(next(at, end, f));
      at = f.end;
      if (f.type != 2) continue;
      const std::optional<Kind> child = child_kind(kind, f.number);
      if (!child) continue;
      std::optional<std::string> sub;
      BALLAST_RETURN_IF_ERROR(message(*child, f.payload, f.end, depth + 1, sub));
      if (!sub) continue;
      if (!changed) rebuilt.reserve(end - begin + 64);
      changed = true;
      rebuilt.append(text(copied, f.begin));
      put_len_field(rebuilt, f.number, *sub);
      copied = f.end;
    }
    if (changed) {
      rebuilt.append(text(copied, end));
      out = std::move(rebuilt);
    }
    return {};
  }

 private:
  Status tensor(std::size_t begin, std::size_t end, std::optional<std::string>& out) {
    ExternalTensor t;
    t.at = begin;
    std::uint64_t data_location = 0;
    std::vector<Field> entries;
    for (std::size_t at = begin; at < end;) {
      Field f;
      BALLAST_RETURN_IF_ERROR(next(at, end, f));
      at = f.end;
      if (f.number == kTensorName && f.type == 2) t.name = text(f.payload, f.end);
      if (f.number == kTensorDataLocation && f.type == 0) data_location = f.value;
      if (f.number == kTensorExternalData && f.type == 2) entries.push_back(f);
    }
    // Entries on a tensor that is not EXTERNAL are not read by anyone: kept.
    if (data_location != 1) return {};
    for (const Field& e : entries) {
      std::string key, value;
      for (std::size_t at = e.payload; at < e.end;) {
        Field f;
        BALLAST_RETURN_IF_ERROR(next(at, e.end, f));
        at = f.end;
        if (f.type != 2) continue;
        if (f.number == 1) key = text(f.payload, f.end);
        if (f.number == 2) value = text(f.payload, f.end);
      }
      t.entries.emplace_back(std::move(key), std::move(value));
    }
    BALLAST_ASSIGN_OR_RETURN(auto replaced, rewrite_(t));
    std::string rebuilt;
    rebuilt.reserve(end - begin + 64);
    std::size_t copied = begin;
    bool written = false;
    for (const Field& e : entries) {
      rebuilt.append(text(copied, e.begin));
      copied = e.end;
      if (written) continue;
      written = true;
      for (const auto& [key, value] : replaced) {
        std::string entry;
        put_len_field(entry, 1, key);
        put_len_field(entry, 2, value);
        put_len_field(rebuilt, kTensorExternalData, entry);
      }
    }
    rebuilt.append(text(copied, end));
    if (!written) {  // EXTERNAL with no entries: the loader refused it already; add them at the end
      for (const auto& [key, value] : replaced) {
        std::string entry;
        put_len_field(entry, 1, key);
        put_len_field(entry, 2, value);
        put_len_field(rebuilt, kTensorExternalData, entry);
      }
    }
    out = std::move(rebuilt);
    return {};
  }

  std::string_view text(std::size_t begin, std::size_t end) const {
    return {reinterpret_cast<const char*>(bytes_.data()) + begin, end - begin};
  }

  static Error fail(std::string message, std::size_t at) {
    Error e = make_error(ErrorCode::malformed, std::move(message));
    e.offset = at;
    return e;
  }

  Status varint(std::size_t& at, std::size_t end, std::uint64_t& v) const {
    v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
      if (at >= end) return fail("truncated varint", at);
      const auto b = static_cast<std::uint8_t>(bytes_[at++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return {};
    }
    return fail("varint longer than 10 bytes", at);
  }

  Status next(std::size_t at, std::size_t end, Field& f) const {
    f.begin = at;
    std::uint64_t key = 0;
    BALLAST_RETURN_IF_ERROR(varint(at, end, key));
    f.number = key >> 3;
    f.type = static_cast<unsigned>(key & 7);
    if (f.number == 0) return fail("field number 0", f.begin);
    switch (f.type) {
      case 0: BALLAST_RETURN_IF_ERROR(varint(at, end, f.value)); break;
      case 1:
        if (end - at < 8) return fail("truncated fixed64 field", f.begin);
        at += 8;
        break;
      case 5:
        if (end - at < 4) return fail("truncated fixed32 field", f.begin);
        at += 4;
        break;
      case 2: {
        std::uint64_t length = 0;
        BALLAST_RETURN_IF_ERROR(varint(at, end, length));
        if (length > end - at) return fail("length-delimited field runs past its message", f.begin);
        f.payload = at;
        at += static_cast<std::size_t>(length);
        break;
      }
      default: return fail("wire type " + std::to_string(f.type) + " (groups are not ONNX)", f.begin);
    }
    f.end = at;
    return {};
  }

  Bytes bytes_;
  const ExternalRewrite& rewrite_;
};

}  // namespace

Result<std::string> rewrite_external_data(Bytes onnx, const ExternalRewrite& rewrite) {
  Rewriter r(onnx, rewrite);
  std::optional<std::string> out;
  BALLAST_RETURN_IF_ERROR(r.message(Kind::model, 0, onnx.size(), 0, out));
  if (out) return std::move(*out);
  return std::string(reinterpret_cast<const char*>(onnx.data()), onnx.size());
}

}  // namespace ballast::cli
