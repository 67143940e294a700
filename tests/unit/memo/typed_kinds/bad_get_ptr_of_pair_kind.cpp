// expect: get_ptr
#include <ballast/derived_weights.hpp>

void call(ballast::DerivedWeights& m) { static_cast<void>(m.get_ptr(ballast::derive::quant_int8, 1)); }
