// The kind table (derivation_kinds.hpp) as derivation_layout() evaluates it:
// every operand's element type, dims and bytes, per the layouts written in
// docs/derivations.md, and the table's own consistency.
#include <ballast/derivation.hpp>
#include <ballast/derived_weights.hpp>
#include <ballast/dtype.hpp>
#include <doctest/doctest.h>

#include <vector>

using namespace ballast;
using kinds::Slot;

namespace {

std::vector<std::uint64_t> dims(const OperandLayout& o) { return {o.dims, o.dims + o.rank}; }

DerivationLaunch launch(Derivation kind, DataType t, std::uint64_t rows, std::uint64_t cols, std::uint32_t bs = 0,
                        ZeroPoints zp = ZeroPoints::absent) {
  DerivationLaunch l;
  l.kind = kind;
  l.src_type = t;
  l.rows = rows;
  l.cols = cols;
  l.block_size = bs;
  l.zero_points = zp;
  return l;
}

}  // namespace

TEST_CASE("the table has one row per kind, named as derivation_name says") {
  CHECK(kinds::covers_every_kind(kinds::kTable));
  for (int i = 0; i < kDerivationCount; ++i) {
    const auto d = static_cast<Derivation>(i);
    CAPTURE(i);
    CHECK(derivation_name(d) == derivation_kind(d).name);
    CHECK(derivation_yields_pair(d) == derivation_kind(d).pair);
    CHECK(derive::yields_pair(d) == derivation_kind(d).pair);
    // A pair kind has two outputs, a single kind one, and every kind reads a source.
    int outputs = 0, sources = 0;
    for (int o = 0; o < derivation_kind(d).operand_count; ++o) {
      outputs += kinds::is_output(derivation_kind(d).operands[o].slot);
      sources += derivation_kind(d).operands[o].slot == Slot::src;
    }
    CHECK(outputs == (derivation_kind(d).pair ? 2 : 1));
    CHECK(sources == 1);
  }
  CHECK(derivation_name(static_cast<Derivation>(kDerivationCount)) == "unknown");
  CHECK_FALSE(derivation_yields_pair(static_cast<Derivation>(200)));
}

TEST_CASE("transpose: [R, C] -> [C, R] of the source's own element type") {
  const auto l = derivation_layout(launch(Derivation::transpose, DataType::int64, 3, 5));
  REQUIRE(l.ok());
  CHECK(dims((*l)[Slot::src]) == std::vector<std::uint64_t>{3, 5});
  CHECK((*l)[Slot::dst].type == DataType::int64);
  CHECK(dims((*l)[Slot::dst]) == std::vector<std::uint64_t>{5, 3});
  CHECK((*l)[Slot::dst].bytes == 3 * 5 * 8);
  CHECK_FALSE((*l)[Slot::scales].present);
  CHECK_FALSE((*l)[Slot::dst2].present);
}

TEST_CASE("repack_int4: B, scales and each zero-point form, words and scale/offset pairs") {
  // N = 3, K = 40, block 16: k_blocks = 3.
  auto l = derivation_layout(launch(Derivation::repack_int4, DataType::float16, 3, 40, 16, ZeroPoints::packed_u4));
  REQUIRE(l.ok());
  CHECK(dims((*l)[Slot::src]) == std::vector<std::uint64_t>{3, 3, 8});
  CHECK((*l)[Slot::src].type == DataType::uint8);
  CHECK(dims((*l)[Slot::scales]) == std::vector<std::uint64_t>{3, 3});
  CHECK((*l)[Slot::scales].type == DataType::float16);
  CHECK((*l)[Slot::zero_point].type == DataType::uint8);
  CHECK(dims((*l)[Slot::zero_point]) == std::vector<std::uint64_t>{3, 2});
  CHECK((*l)[Slot::dst].type == DataType::uint32);
  CHECK(dims((*l)[Slot::dst]) == std::vector<std::uint64_t>{3, 5});
  CHECK(std::string((*l)[Slot::dst].row->suffix) == ".words");
  CHECK((*l)[Slot::dst2].type == DataType::float16);
  CHECK(dims((*l)[Slot::dst2]) == std::vector<std::uint64_t>{3, 3, 2});
  CHECK(std::string((*l)[Slot::dst2].row->suffix) == ".scale_offset");

  l = derivation_layout(launch(Derivation::repack_int4, DataType::float32, 3, 40, 16, ZeroPoints::unpacked));
  REQUIRE(l.ok());
  CHECK((*l)[Slot::zero_point].type == DataType::float32);
  CHECK(dims((*l)[Slot::zero_point]) == std::vector<std::uint64_t>{3, 3});

  l = derivation_layout(launch(Derivation::repack_int4, DataType::float32, 3, 40, 16, ZeroPoints::absent));
  REQUIRE(l.ok());
  CHECK_FALSE((*l)[Slot::zero_point].present);
  CHECK((*l)[Slot::zero_point].bytes == 0);
}

TEST_CASE("quant_int8: int8 codes [N, K] and one float scale per row") {
  const auto l = derivation_layout(launch(Derivation::quant_int8, DataType::float16, 4, 7));
  REQUIRE(l.ok());
  CHECK((*l)[Slot::dst].type == DataType::int8);
  CHECK(dims((*l)[Slot::dst]) == std::vector<std::uint64_t>{4, 7});
  CHECK((*l)[Slot::dst].row->rounding == kinds::Rounding::int8_code);
  CHECK((*l)[Slot::dst2].type == DataType::float32);
  CHECK(dims((*l)[Slot::dst2]) == std::vector<std::uint64_t>{4});
}

TEST_CASE("a kind's other fields are ignored: zero points on a dense kind, a block size on transpose") {
  auto l = launch(Derivation::to_f16, DataType::bfloat16, 2, 3, 7, static_cast<ZeroPoints>(9));
  REQUIRE(derivation_layout(l).ok());
  CHECK(derivation_sizes(l)->dst_bytes == 2 * 3 * 2);
  l.kind = Derivation::dequant_int4;
  l.src_type = DataType::float16;
  l.block_size = 16;
  CHECK(derivation_layout(l).error().message.find("zero_points") != std::string::npos);
}

TEST_CASE("refusals name the kind, the role of the type and the accepted types") {
  auto r = derivation_layout(launch(Derivation::to_f16, DataType::int32, 2, 2));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::unsupported);
  CHECK(r.error().message == "to_f16: source must be float or bfloat16, not int32");
  r = derivation_layout(launch(Derivation::dequant_int4, DataType::bfloat16, 2, 32, 16));
  CHECK(r.error().message == "dequant_int4: scales must be float or float16, not bfloat16");
  r = derivation_layout(launch(Derivation::transpose, DataType::int4, 2, 2));
  CHECK(r.error().message == "transpose: element type int4 is not 1, 2, 4 or 8 bytes wide");
  r = derivation_layout(launch(static_cast<Derivation>(kDerivationCount), DataType::float32, 1, 1));
  CHECK(r.error().code == ErrorCode::invalid_argument);
  // A size past 64 bits names the kind and the operand.
  r = derivation_layout(launch(Derivation::quant_int8, DataType::float32, std::uint64_t{1} << 32, std::uint64_t{1} << 31));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::overflow);
  CHECK(r.error().message == "quant_int8 src bytes overflow 64 bits");
}

TEST_CASE("dequant_gguf(_f32): [rows, blocks, block bytes] of uint8 to [rows, cols] f16 or f32") {
  const auto q = derivation_layout(launch(Derivation::dequant_gguf, DataType::q4_k, 3, 512));
  REQUIRE_MESSAGE(q.ok(), q.error().to_string());
  CHECK(dims((*q)[Slot::src]) == std::vector<std::uint64_t>{3, 2, 144});
  CHECK((*q)[Slot::src].bytes == 3 * 2 * 144);
  CHECK((*q)[Slot::dst].type == DataType::float16);
  CHECK(dims((*q)[Slot::dst]) == std::vector<std::uint64_t>{3, 512});
  CHECK((*q)[Slot::dst].bytes == 3 * 512 * 2);
  const auto f = derivation_layout(launch(Derivation::dequant_gguf_f32, DataType::q8_0, 2, 64));
  REQUIRE(f.ok());
  CHECK(dims((*f)[Slot::src]) == std::vector<std::uint64_t>{2, 2, 34});
  CHECK((*f)[Slot::dst].type == DataType::float32);
  CHECK((*f)[Slot::dst].bytes == 2 * 64 * 4);
  const auto plain = derivation_layout(launch(Derivation::dequant_gguf, DataType::bfloat16, 2, 3));
  REQUIRE(plain.ok());
  CHECK(dims((*plain)[Slot::src]) == std::vector<std::uint64_t>{2, 3, 2});  // blocks of one element

  // Part of a block, a type no kind reads, a type that is not GGUF's.
  const auto partial = derivation_layout(launch(Derivation::dequant_gguf, DataType::q4_k, 1, 255));
  REQUIRE_FALSE(partial.ok());
  CHECK(partial.error().message.find("whole number of q4_k blocks (256 elements), got 255") != std::string::npos);
  const auto iq = derivation_layout(launch(Derivation::dequant_gguf, DataType::iq2_xxs, 1, 256));
  REQUIRE_FALSE(iq.ok());
  CHECK(iq.code() == ErrorCode::unsupported);
  CHECK(iq.error().message.find("not iq2_xxs") != std::string::npos);
  CHECK(derivation_layout(launch(Derivation::dequant_gguf_f32, DataType::int8, 1, 4)).code() == ErrorCode::unsupported);
  // Rows x cols that overflow are refused before any block is counted.
  CHECK(derivation_layout(launch(Derivation::dequant_gguf, DataType::q8_0, std::uint64_t{1} << 40, std::uint64_t{1} << 30))
            .code() == ErrorCode::overflow);
}

TEST_CASE("the GGUF kinds' block table agrees with dtype_block() on every type") {
  for (const kinds::GgufBlock& b : kinds::kGgufBlocks) {
    CAPTURE(dtype_name(b.type));
    if (b.elements == 1) {
      CHECK(dtype_bits(b.type) == 8u * b.bytes);  // a plain float type
      continue;
    }
    const auto blk = dtype_block(b.type);
    REQUIRE(blk.has_value());
    CHECK(blk->elements == b.elements);
    CHECK(blk->bytes == b.bytes);
  }
}
