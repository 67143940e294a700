// expect: insert_ptr
#include <ballast/derived_weights.hpp>

void call(ballast::DerivedWeights& m) {
  static_cast<void>(m.insert_ptr(ballast::derive::repack_int4, 1, ballast::DerivedPtr{}));
}
