// Compiled (once) by check_typed_kinds.cmake, which expects the compiler to
// reject every call filed under a `bad_*` name (each is a separate
// diagnostic, attributed by its #line) and to accept every call filed under
// `good_calls` (so the rejections cannot come from an unrelated breakage).
#include <ballast/derived_weights.hpp>

using namespace ballast;

static DerivationKey key_of(std::uint64_t source) {
  DerivationKey k;
  k.source = source;
  return k;
}

void good(DerivedWeights& m) {
#line 1 "good_calls"
  static_cast<void>(m.get_ptr(derive::transpose, key_of(1)));
  static_cast<void>(m.get_pair(derive::quant_int8, key_of(1)));
  static_cast<void>(m.insert_ptr(derive::to_f16, key_of(1), DerivedPtr{}));
  static_cast<void>(m.insert_pair(derive::repack_int4, key_of(1), DerivedPair{}));
  static_cast<void>(m.get_or_build_ptr(derive::dequant_int4, key_of(1), [] { return Result<DerivedPtr>(DerivedPtr{}); }));
  static_cast<void>(m.get_or_build_pair(derive::quant_int8, key_of(1), [] { return Result<DerivedPair>(DerivedPair{}); }));
  static_cast<void>(m.get_ptr(Derivation::quant_int8, key_of(1)));  // run-time kind: compiles, returns wrong_kind
}

void bad(DerivedWeights& m) {
#line 1 "bad_get_ptr_of_pair_kind"
  static_cast<void>(m.get_ptr(derive::quant_int8, key_of(1)));
#line 1 "bad_get_pair_of_single_kind"
  static_cast<void>(m.get_pair(derive::transpose, key_of(1)));
#line 1 "bad_insert_ptr_of_pair_kind"
  static_cast<void>(m.insert_ptr(derive::repack_int4, key_of(1), DerivedPtr{}));
#line 1 "bad_insert_pair_of_single_kind"
  static_cast<void>(m.insert_pair(derive::to_f16, key_of(1), DerivedPair{}));
#line 1 "bad_get_or_build_ptr_of_pair_kind"
  static_cast<void>(m.get_or_build_ptr(derive::quant_int8, key_of(1), [] { return Result<DerivedPtr>(DerivedPtr{}); }));
#line 1 "bad_get_or_build_pair_of_single_kind"
  static_cast<void>(m.get_or_build_pair(derive::dequant_int4, key_of(1), [] { return Result<DerivedPair>(DerivedPair{}); }));
#line 1 "bad_build_returns_pair_for_ptr"
  static_cast<void>(m.get_or_build_ptr(derive::transpose, key_of(1), [] { return Result<DerivedPair>(DerivedPair{}); }));
#line 1 "bad_tag_is_not_a_derivation_value"
  static_cast<void>(m.get_ptr(static_cast<Derivation>(derive::transpose), 1));
}
