// The well-typed calls: this file must compile, or the bad_*.cpp checks
// would prove nothing (they could fail for an unrelated reason).
#include <ballast/derived_weights.hpp>

void calls(ballast::DerivedWeights& m) {
  using namespace ballast;
  static_cast<void>(m.get_ptr(derive::transpose, 1));
  static_cast<void>(m.get_pair(derive::quant_int8, 1));
  static_cast<void>(m.insert_ptr(derive::to_f16, 1, DerivedPtr{}));
  static_cast<void>(m.insert_pair(derive::repack_int4, 1, DerivedPair{}));
  static_cast<void>(m.get_or_build_ptr(derive::dequant_int4, 1, [] { return Result<DerivedPtr>(DerivedPtr{}); }));
  static_cast<void>(m.get_or_build_pair(derive::quant_int8, 1, [] { return Result<DerivedPair>(DerivedPair{}); }));
}
