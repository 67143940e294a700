// parse_backend_config: name[:device][?key=value(&key=value)*]
// A small hand-written scanner so that every refusal can name the exact
// character where the string stopped making sense.
#include <ballast/backend_registry.hpp>

#include <cctype>
#include <climits>
#include <string>

namespace ballast {
namespace {

bool is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }
bool is_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
}
// Values are printable ASCII without the grammar's own separators, so a
// config string never needs quoting or escaping.
bool is_value_char(char c) { return c > ' ' && c < 0x7f && c != '&' && c != '=' && c != '?'; }
bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<BackendConfig> parse() {
    BackendConfig config;
    // A config string is a few dozen bytes; a longer one is a mistake (or
    // hostile), and every message quoting it would carry it whole.
    if (text_.size() > kMaxConfigBytes)
      return make_error(ErrorCode::invalid_argument, "invalid backend config \"" + quoted() + "\" of " +
                                                         std::to_string(text_.size()) + " bytes: at most " +
                                                         std::to_string(kMaxConfigBytes));
    config.text = std::string(text_);
    if (text_.empty()) return fail(0, "empty string; expected a backend name such as cpu, cuda, hip or vulkan");

    const std::size_t name_end = scan(0, is_name_char);
    if (name_end == 0) return fail(0, "expected a backend name (lowercase letters, digits, '_')");
    config.name = std::string(text_.substr(0, name_end));
    pos_ = name_end;

    if (pos_ < text_.size() && text_[pos_] == ':') {
      ++pos_;
      BALLAST_RETURN_IF_ERROR(parse_device(config));
    }
    if (pos_ < text_.size() && text_[pos_] == '?') {
      ++pos_;
      BALLAST_RETURN_IF_ERROR(parse_options(config));
    }
    if (pos_ < text_.size()) {
      return fail(pos_, "unexpected '" + printable(text_[pos_]) + "'; expected ':' (device), '?' (options) or the end");
    }
    return config;
  }

 private:
  Status parse_device(BackendConfig& config) {
    const std::size_t start = pos_;
    if (start >= text_.size() || text_[start] == '?') {
      return fail(start, "expected a device index or GPU-<uuid> after ':'");
    }
    if (text_.substr(start, 4) == "GPU-") return parse_uuid(config);
    const std::size_t end = scan(start, [](char c) { return c >= '0' && c <= '9'; });
    if (end == start) return fail(start, "expected a device index (non-negative decimal) or GPU-<uuid>");
    long long index = 0;
    for (std::size_t i = start; i < end; ++i) {
      index = index * 10 + (text_[i] - '0');
      if (index > INT_MAX) return fail(start, "device index is too large");
    }
    config.device_index = static_cast<int>(index);
    pos_ = end;
    return {};
  }

  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hex in either case; stored
  // in lower case so plugins can compare it with their own UUIDs directly.
  Status parse_uuid(BackendConfig& config) {
    static constexpr std::size_t kGroups[] = {8, 4, 4, 4, 12};
    std::size_t p = pos_ + 4;
    std::string uuid = "GPU-";
    for (std::size_t g = 0; g < 5; ++g) {
      if (g > 0) {
        if (p >= text_.size() || text_[p] != '-') return fail(p, "malformed UUID: expected '-' (shape 8-4-4-4-12 hex digits)");
        uuid += '-';
        ++p;
      }
      for (std::size_t i = 0; i < kGroups[g]; ++i, ++p) {
        if (p >= text_.size() || !is_hex(text_[p])) {
          return fail(p, "malformed UUID: expected a hex digit (shape 8-4-4-4-12 hex digits)");
        }
        uuid += static_cast<char>(std::tolower(static_cast<unsigned char>(text_[p])));
      }
    }
    config.device_uuid = std::move(uuid);
    pos_ = p;
    return {};
  }

  Status parse_options(BackendConfig& config) {
    while (true) {
      const std::size_t key_start = pos_;
      const std::size_t key_end = scan(key_start, is_key_char);
      if (key_end == key_start) return fail(key_start, "expected an option key (letters, digits, '_', '-', '.')");
      std::string key(text_.substr(key_start, key_end - key_start));
      if (key_end >= text_.size() || text_[key_end] != '=') {
        return fail(key_end, "expected '=' after option key \"" + key + "\"");
      }
      const std::size_t value_start = key_end + 1;
      const std::size_t value_end = scan(value_start, is_value_char);
      if (value_end == value_start) return fail(value_start, "expected a value for option \"" + key + "\"");
      if (config.options.count(key) != 0) return fail(key_start, "option \"" + key + "\" given twice");
      config.options.emplace(std::move(key), std::string(text_.substr(value_start, value_end - value_start)));
      pos_ = value_end;
      if (pos_ < text_.size() && text_[pos_] == '&') {
        ++pos_;
        continue;
      }
      return {};
    }
  }

  template <class Pred>
  std::size_t scan(std::size_t from, Pred pred) const {
    while (from < text_.size() && pred(text_[from])) ++from;
    return from;
  }

  static std::string printable(char c) {
    if (c >= ' ' && c < 0x7f) return std::string(1, c);
    static constexpr char kHex[] = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(c);
    return std::string("\\x") + kHex[u >> 4] + kHex[u & 15];
  }

  Error fail(std::size_t position, const std::string& why) const {
    return make_error(ErrorCode::invalid_argument, "invalid backend config \"" + quoted() + "\" at position " +
                                                       std::to_string(position) + ": " + why);
  }

  // The string, escaped, cut after kQuotedBytes of it.
  std::string quoted() const {
    std::string out;
    for (char c : text_.substr(0, kQuotedBytes)) out += printable(c);
    if (text_.size() > kQuotedBytes) out += "...";
    return out;
  }

  static constexpr std::size_t kMaxConfigBytes = 1024;
  static constexpr std::size_t kQuotedBytes = 80;

  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace

Result<BackendConfig> parse_backend_config(std::string_view text) { return Parser(text).parse(); }

}  // namespace ballast
