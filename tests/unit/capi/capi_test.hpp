// Helpers of the C API tests: a status checked and freed in one place.
#pragma once

#include <ballast/ballast.h>
#include <doctest/doctest.h>

#include <string>

namespace capi_test {

// The status's code, its message kept for the failure report, the status freed.
struct Outcome {
  ballast_code code;
  std::string message;
};
inline Outcome take(ballast_status* s) {
  Outcome o{ballast_status_code(s), ballast_status_message(s)};
  ballast_status_free(s);
  return o;
}

}  // namespace capi_test

// The call succeeded (the status was NULL).
#define CAPI_OK(call)                                   \
  do {                                                  \
    capi_test::Outcome o_ = capi_test::take(call);      \
    INFO(o_.message);                                   \
    REQUIRE(o_.code == BALLAST_OK);                     \
  } while (false)

// The call failed with `code`.
#define CAPI_FAILS(call, expected)                      \
  do {                                                  \
    capi_test::Outcome o_ = capi_test::take(call);      \
    INFO(o_.message);                                   \
    CHECK(o_.code == (expected));                       \
  } while (false)
