#include "derive/name_pattern.hpp"

namespace ballast::derive {

namespace {

constexpr std::size_t kMaxAlternatives = 256;

// `*` and `?` against the whole name. Greedy with one backtrack point (the
// last star): O(name x pattern) at worst, never exponential.
bool glob(std::string_view p, std::string_view s) noexcept {
  std::size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == s[si]))) {
      ++pi, ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace

Result<NamePattern> NamePattern::compile(std::string_view pattern) {
  auto bad = [&](std::string why) {
    return make_error(ErrorCode::invalid_argument, "pattern '" + std::string(pattern.substr(0, 200)) + "': " + why);
  };
  if (pattern.empty()) return bad("empty");
  NamePattern out;
  out.globs_.emplace_back();
  std::size_t i = 0;
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '}') return bad("'}' without '{'");
    if (c != '{') {
      for (std::string& g : out.globs_) g += c;
      ++i;
      continue;
    }
    const std::size_t close = pattern.find('}', i);
    if (close == std::string_view::npos) return bad("'{' without '}'");
    const std::string_view body = pattern.substr(i + 1, close - i - 1);
    if (body.find('{') != std::string_view::npos) return bad("nested braces");
    std::vector<std::string_view> alternatives;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = body.find(',', start);
      alternatives.push_back(body.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (out.globs_.size() * alternatives.size() > kMaxAlternatives)
      return bad("more than " + std::to_string(kMaxAlternatives) + " alternatives");
    std::vector<std::string> next;
    next.reserve(out.globs_.size() * alternatives.size());
    for (const std::string& g : out.globs_)
      for (std::string_view a : alternatives) next.push_back(g + std::string(a));
    out.globs_ = std::move(next);
    i = close + 1;
  }
  return out;
}

bool NamePattern::matches(std::string_view name) const noexcept {
  for (const std::string& g : globs_)
    if (glob(g, name)) return true;
  return false;
}

}  // namespace ballast::derive
