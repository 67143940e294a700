// Weight-name patterns for derivation rules: `*` any run of characters,
// `?` one character, `{a,b,c}` one of the alternatives; matched against the
// whole name.
#pragma once

#include <ballast/status.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace ballast::derive {

class NamePattern {
 public:
  // invalid_argument for an empty pattern, unbalanced or nested braces, or
  // more than 256 alternatives in all.
  static Result<NamePattern> compile(std::string_view pattern);
  bool matches(std::string_view name) const noexcept;

 private:
  std::vector<std::string> globs_;  // the braces expanded
};

}  // namespace ballast::derive
