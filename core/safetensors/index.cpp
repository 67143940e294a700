#include "safetensors/index.hpp"

#include "onnx/external_data.hpp"  // shown()
#include "safetensors/header.hpp"  // first_invalid_utf8
#include "safetensors/json_events.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

namespace ballast::safetensors {

namespace {

class IndexEvents final : public JsonEvents {
 public:
  explicit IndexEvents(std::uint32_t max_tensors) : max_tensors_(max_tensors) {}
  IndexFile index;

 private:
  enum class Section { none, metadata, weight_map };

  bool on_key(unsigned depth, std::string& key) override {
    if (depth == 1) {
      if (!top_keys_.insert(key).second)
        return fail(ErrorCode::malformed, "index key " + onnx::shown(key) + " appears twice");
      if (key == "weight_map") {
        section_ = Section::weight_map;
        index.has_weight_map = true;
      } else if (key == "metadata") {
        section_ = Section::metadata;
      } else {
        section_ = Section::none;
        skip_next_value();
      }
      return true;
    }
    if (depth == 2 && section_ == Section::weight_map) {
      if (index.weight_map.size() >= max_tensors_)
        return fail(ErrorCode::overflow, "index names more than " + std::to_string(max_tensors_) +
                                             " tensors (LoadOptions::max_tensors_per_file)", key);
      if (!tensors_.insert(key).second)
        return fail(ErrorCode::malformed, "tensor appears twice in the index's weight_map", key);
      index.weight_map.emplace_back(key, std::string());
      return true;
    }
    if (depth == 2 && section_ == Section::metadata) {
      if (!metadata_keys_.insert(key).second)
        return fail(ErrorCode::malformed, "index metadata key " + onnx::shown(key) + " appears twice");
      pending_metadata_ = key;
      return true;
    }
    return true;
  }

  bool on_value(unsigned depth, const Value& v) override {
    if (depth == 0) return v.kind == Kind::object ? true : fail(ErrorCode::malformed, "the index is not a JSON object");
    if (depth == 1) {
      if (v.kind != Kind::object && !(section_ == Section::metadata && v.kind == Kind::null))
        return fail(ErrorCode::malformed, std::string(section_ == Section::weight_map ? "weight_map" : "metadata") +
                                              " is a JSON " + kind_name(v.kind) + ", not an object");
      return true;
    }
    if (depth == 2 && section_ == Section::weight_map) {
      if (v.kind != Kind::string)
        return fail(ErrorCode::malformed, std::string("weight_map names a JSON ") + kind_name(v.kind) + ", not a shard file",
                    index.weight_map.back().first);
      index.weight_map.back().second = std::move(*v.text);
      return true;
    }
    if (depth == 2 && section_ == Section::metadata) {
      if (v.kind == Kind::string) index.metadata.emplace_back(std::move(pending_metadata_), std::move(*v.text));
      else if (v.kind == Kind::unsigned_number) index.metadata.emplace_back(std::move(pending_metadata_), std::to_string(v.number));
      return true;  // other values are not kept
    }
    return true;
  }

  bool on_end(unsigned depth, Kind) override {
    if (depth == 1) section_ = Section::none;
    return true;
  }

  std::uint32_t max_tensors_;
  Section section_ = Section::none;
  std::unordered_set<std::string> top_keys_;
  std::unordered_set<std::string> tensors_;
  std::unordered_set<std::string> metadata_keys_;
  std::string pending_metadata_;
};

}  // namespace

Result<IndexFile> parse_index(std::string_view json, std::uint32_t max_tensors, std::uint64_t max_string_bytes) {
  if (auto bad = first_invalid_utf8(json)) {
    Error e = make_error(ErrorCode::malformed, "index is not valid UTF-8");
    e.offset = *bad;
    return e;
  }
  IndexEvents events(max_tensors);
  if (Status s = events.parse(json, max_string_bytes); !s.ok()) return std::move(s.error());
  if (!events.index.has_weight_map)
    return make_error(ErrorCode::malformed, "index has no weight_map (the object naming each tensor's shard)");
  return std::move(events.index);
}

bool looks_like_index(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t')) ++i;
  if (i == text.size() || text[i] != '{') return false;
  return text.find("\"weight_map\"") != std::string_view::npos;
}

Result<std::string> read_index_text(int fd, std::uint64_t size, std::uint64_t cap, const std::string& display) {
  if (size > cap) {
    Error e = make_error(ErrorCode::overflow, "index of " + std::to_string(size) + " bytes exceeds the cap of " +
                                                  std::to_string(cap) + " bytes (LoadOptions::max_header_bytes)");
    e.file = display;
    return e;
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Error e = make_error(ErrorCode::io, n == 0 ? "index ended early (it shrank while it was read)"
                                                 : std::string("reading the index: ") + std::strerror(errno));
      e.file = display;
      return e;
    }
    done += static_cast<std::size_t>(n);
  }
  return text;
}

}  // namespace ballast::safetensors
