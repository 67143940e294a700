// expect: insert_pair
#include <ballast/derived_weights.hpp>

void call(ballast::DerivedWeights& m) {
  static_cast<void>(m.insert_pair(ballast::derive::to_f16, 1, ballast::DerivedPair{}));
}
