// expect: get_or_build_ptr
#include <ballast/derived_weights.hpp>

void call(ballast::DerivedWeights& m) {
  using namespace ballast;
  static_cast<void>(m.get_or_build_ptr(derive::quant_int8, 1, [] { return Result<DerivedPtr>(DerivedPtr{}); }));
}
