// Several threads allocating, launching, copying back and verifying on the
// one backend at the same time.
#include "conformance/conformance.hpp"
#include "conformance/derivation_runner.hpp"

#include <string>
#include <thread>
#include <vector>

using namespace conformance;
using ballast::DataType;
using ballast::Derivation;
using ballast::ZeroPoints;

namespace {

DerivationCase case_for(unsigned thread, unsigned round) {
  const std::uint64_t seed = 1000 + thread * 100 + round;
  switch ((thread + round) % 5) {
    case 0: return transpose_case(DataType::float16, 97 + thread, 211, seed);
    case 1: return to_f16_case(DataType::float32, 64, 1000 + thread, true, seed);
    case 2: return int4_case(Derivation::dequant_int4, DataType::float16, ZeroPoints::packed_u4, 33, 200 + thread, 32, false, seed);
    case 3: return int4_case(Derivation::repack_int4, DataType::float32, ZeroPoints::unpacked, 17, 130 + thread, 64, false, seed);
    default: return quant_int8_case(DataType::float16, 40 + thread, 513, false, seed);
  }
}

}  // namespace

TEST_CASE("threads: concurrent allocation, launches, copies and verification") {
  LeakCheck leaks;
  constexpr unsigned kThreads = 6;
  constexpr unsigned kRounds = 5;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      for (unsigned r = 0; r < kRounds && failures[t].empty(); ++r) {
        const DerivationCase c = case_for(t, r);
        const std::string failure = run_derivation_case(c);
        if (!failure.empty()) failures[t] = c.label + ": " + failure;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (unsigned t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK_MESSAGE(failures[t].empty(), failures[t]);
  }
}
