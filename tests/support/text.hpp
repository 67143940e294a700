// Text checks the tests share (error messages, reports, listings). One
// definition, so that a unity build of several test files sees one.
#pragma once

#include <string_view>

namespace ballast::testing {

// Whether `part` occurs in `text`.
inline bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

}  // namespace ballast::testing
