// expect: get_pair
#include <ballast/derived_weights.hpp>

void call(ballast::DerivedWeights& m) { static_cast<void>(m.get_pair(ballast::derive::transpose, 1)); }
