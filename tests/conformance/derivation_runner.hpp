// Runs a derivation test case (tests/support/derivation_cases.hpp) on the
// backend under test and compares it with the scalar reference.
#pragma once

#include <support/derivation_cases.hpp>

#include <string>

namespace conformance {

using ballast::test_cases::DerivationCase;
using ballast::test_cases::gguf_case;
using ballast::test_cases::int4_case;
using ballast::test_cases::quant_int8_case;
using ballast::test_cases::to_f16_case;
using ballast::test_cases::transpose_case;

// Runs `c` on the backend under test: uploads its inputs, launches,
// synchronizes, downloads and compares with the reference under the
// documented tolerances. Empty on success, else what went wrong. Frees
// everything it allocated on every path; uses no test-framework macros, so
// it may run on any thread.
std::string run_derivation_case(const DerivationCase& c);

}  // namespace conformance
