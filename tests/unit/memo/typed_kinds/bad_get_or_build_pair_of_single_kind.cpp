// expect: get_or_build_pair
#include <ballast/derived_weights.hpp>

void call(ballast::DerivedWeights& m) {
  using namespace ballast;
  static_cast<void>(m.get_or_build_pair(derive::dequant_int4, 1, [] { return Result<DerivedPair>(DerivedPair{}); }));
}
