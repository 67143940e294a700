// The one description of every derivation kind: its name, whether it
// yields a pair, the source types it takes, and each operand's element type
// and shape in terms of a launch's fields. derivation_sizes() and
// check_operand_alignment() evaluate it, the CLI names and shapes its .npy
// files from it, and the tests' reference comparison, fuzz model and corpus
// generator read it, so adding a kind is a row here, not a switch in each of
// them (docs/architecture.md, "Adding a derivation kind", lists the rest).
//
// Plain constexpr data in C++17 with no dependence on the library's build:
// the CUDA and HIP kernel objects (compiled as C++17) include it too.
#pragma once

#include <ballast/data_type.hpp>

#include <cstddef>
#include <cstdint>

namespace ballast {

enum class Derivation : std::uint8_t {
  transpose = 0,     // -> one pointer
  to_f16 = 1,        // -> one pointer
  dequant_int4 = 2,  // -> one pointer
  repack_int4 = 3,   // -> a pair (words, scale/offset pairs)
  quant_int8 = 4,    // -> a pair (codes, scales)
  dequant_gguf = 5,      // GGUF blocks -> f16, one pointer
  dequant_gguf_f32 = 6,  // GGUF blocks -> f32, one pointer
  repack_gguf_int4 = 7,  // GGUF Q4_0/Q4_1 -> repack_int4's pair (words, scale/offset pairs)
  quant_int8_given_max = 8,  // quant_int8 with each row's max |w| given (scales operand) -> a pair (codes, scales)
  slice = 9,                 // columns [col_offset, col_offset + cols) of every row of [rows, src_cols] -> one pointer
};
inline constexpr int kDerivationCount = 10;

// How MatMulNBits zero points are given.
enum class ZeroPoints : std::uint8_t {
  absent = 0,     // default 8
  packed_u4 = 1,  // uint8 [N, ceil(k_blocks/2)], low nibble first
  unpacked = 2,   // [N, k_blocks] of the scales' type
};

namespace kinds {

// The five operand slots of a DerivationLaunch, in its field order.
enum class Slot : std::uint8_t { src = 0, scales = 1, zero_point = 2, dst = 3, dst2 = 4 };
inline constexpr int kSlotCount = 5;

// One dimension of an operand's shape, as a function of the launch.
enum class Extent : std::uint8_t {
  rows,             // launch.rows (transpose/to_f16: source rows; int4/int8: N)
  cols,             // launch.cols (K for int4/int8)
  k_blocks,         // ceil(cols / block_size)
  half_block,       // block_size / 2: the bytes of one block of 4-bit codes
  packed_k_blocks,  // ceil(k_blocks / 2): two 4-bit zero points per byte
  words,            // ceil(cols / 8): eight 4-bit codes per 32-bit word
  two,              // 2: a (scale, offset) pair
  blocks,           // cols / the block type's elements per block (GGUF)
  block_bytes,      // the block type's bytes per block (GGUF)
  src_cols,         // launch.src_cols: the source's row length (slice)
};

// When an operand is part of a launch.
enum class When : std::uint8_t { always, zero_points_packed, zero_points_unpacked };

// How an output is compared with the scalar reference (docs/derivations.md):
// bit for bit; as f16 within the documented rounding; as int8 codes that
// may be one off where Capabilities::int8_codes_within_one says so.
enum class Rounding : std::uint8_t { exact, f16, int8_code };

struct Operand {
  Slot slot = Slot::src;
  When when = When::always;
  // The element type: the launch's src_type, or `type` when false.
  bool launch_type = false;
  DataType type = DataType::undefined;
  std::uint8_t rank = 0;
  Extent shape[3] = {};  // outermost first; the operand is dense row-major
  // Outputs only: the suffix of the .npy file name the CLI writes
  // ("" for a kind's only output) and how the output is compared.
  const char* suffix = "";
  Rounding rounding = Rounding::exact;
};

struct Kind {
  Derivation kind = Derivation::transpose;
  const char* name = "";
  bool pair = false;
  // What launch.src_type describes ("element type", "source", "scales"),
  // for messages, and the types accepted (none listed: any type of 1, 2, 4
  // or 8 bytes).
  const char* type_role = "";
  std::uint8_t type_count = 0;
  DataType types[14] = {};
  // int4 kinds: block_size is a power of two >= 16 and N, K are non-zero.
  bool blocked = false;
  // The CLI writes the output with the source weight's own dims (to_f16
  // keeps any rank; the others are matrices).
  bool output_keeps_source_dims = false;
  std::uint8_t operand_count = 0;
  Operand operands[6] = {};
  // GGUF kinds: src_type is a row of kGgufBlocks and cols a whole number of
  // its blocks; block_size is not read.
  bool gguf_blocks = false;
  // slice: reads src_cols and col_offset, and col_offset + cols must not
  // pass src_cols.
  bool column_slice = false;
};

inline constexpr Operand input(Slot s, bool launch_type, DataType t, std::uint8_t rank, Extent a, Extent b = {},
                               Extent c = {}, When when = When::always) {
  return {s, when, launch_type, t, rank, {a, b, c}, "", Rounding::exact};
}
inline constexpr Operand output(Slot s, bool launch_type, DataType t, const char* suffix, Rounding r,
                                std::uint8_t rank, Extent a, Extent b = {}, Extent c = {}) {
  return {s, When::always, launch_type, t, rank, {a, b, c}, suffix, r};
}

inline constexpr bool kLaunch = true, kFixed = false;
inline constexpr DataType kAny = DataType::undefined;
using E = Extent;

// The GGUF tensor types the dequant_gguf kinds read (docs/derivations.md has
// each layout and formula): elements and bytes per block, as ggml defines
// them; the plain float types are blocks of one element. Other block types
// (dtype_block() knows all of GGUF's) are refused by derivations as
// unsupported, by name.
struct GgufBlock {
  DataType type = DataType::undefined;
  std::uint16_t elements = 0;
  std::uint16_t bytes = 0;
};
inline constexpr GgufBlock kGgufBlocks[] = {
    {DataType::float32, 1, 4},  {DataType::float16, 1, 2},  {DataType::bfloat16, 1, 2}, {DataType::q4_0, 32, 18},
    {DataType::q4_1, 32, 20},   {DataType::q5_0, 32, 22},   {DataType::q5_1, 32, 24},    {DataType::q8_0, 32, 34},
    {DataType::q2_k, 256, 84},  {DataType::q3_k, 256, 110}, {DataType::q4_k, 256, 144},  {DataType::q5_k, 256, 176},
    {DataType::q6_k, 256, 210}, {DataType::q8_k, 256, 292},
};

// The row of `t`, or nullptr when the GGUF kinds do not read it.
constexpr const GgufBlock* gguf_block(DataType t) {
  for (const GgufBlock& b : kGgufBlocks)
    if (b.type == t) return &b;
  return nullptr;
}

#define BALLAST_GGUF_TYPES_                                                                                  \
  DataType::float32, DataType::float16, DataType::bfloat16, DataType::q4_0, DataType::q4_1, DataType::q5_0,   \
      DataType::q5_1, DataType::q8_0, DataType::q2_k, DataType::q3_k, DataType::q4_k, DataType::q5_k,         \
      DataType::q6_k, DataType::q8_k

// The int4 kinds' inputs: B, scales, and the zero points in either form.
#define BALLAST_INT4_INPUTS_                                                                              \
  input(Slot::src, kFixed, DataType::uint8, 3, E::rows, E::k_blocks, E::half_block),                     \
      input(Slot::scales, kLaunch, kAny, 2, E::rows, E::k_blocks),                                         \
      input(Slot::zero_point, kFixed, DataType::uint8, 2, E::rows, E::packed_k_blocks, {}, When::zero_points_packed), \
      input(Slot::zero_point, kLaunch, kAny, 2, E::rows, E::k_blocks, {}, When::zero_points_unpacked)

inline constexpr Kind kTable[] = {
    {Derivation::transpose, "transpose", false, "element type", 0, {}, false, false, 2,
     {input(Slot::src, kLaunch, kAny, 2, E::rows, E::cols),
      output(Slot::dst, kLaunch, kAny, "", Rounding::exact, 2, E::cols, E::rows)}},
    {Derivation::to_f16, "to_f16", false, "source", 2, {DataType::float32, DataType::bfloat16}, false, true, 2,
     {input(Slot::src, kLaunch, kAny, 2, E::rows, E::cols),
      output(Slot::dst, kFixed, DataType::float16, "", Rounding::f16, 2, E::rows, E::cols)}},
    {Derivation::dequant_int4, "dequant_int4", false, "scales", 2, {DataType::float32, DataType::float16}, true,
     false, 5,
     {BALLAST_INT4_INPUTS_, output(Slot::dst, kFixed, DataType::float16, "", Rounding::f16, 2, E::rows, E::cols)}},
    {Derivation::repack_int4, "repack_int4", true, "scales", 2, {DataType::float32, DataType::float16}, true, false,
     6,
     {BALLAST_INT4_INPUTS_, output(Slot::dst, kFixed, DataType::uint32, ".words", Rounding::exact, 2, E::rows, E::words),
      output(Slot::dst2, kFixed, DataType::float16, ".scale_offset", Rounding::f16, 3, E::rows, E::k_blocks, E::two)}},
    {Derivation::quant_int8, "quant_int8", true, "source", 2, {DataType::float32, DataType::float16}, false, false, 3,
     {input(Slot::src, kLaunch, kAny, 2, E::rows, E::cols),
      output(Slot::dst, kFixed, DataType::int8, ".codes", Rounding::int8_code, 2, E::rows, E::cols),
      output(Slot::dst2, kFixed, DataType::float32, ".scales", Rounding::exact, 1, E::rows)}},
    // GGUF tensors: rows = the product of the outer dims, cols = ne[0]; the
    // source is the tensor's bytes, [rows, cols / block elements, block bytes].
    {Derivation::dequant_gguf, "dequant_gguf", false, "block type", 14, {BALLAST_GGUF_TYPES_}, false, true, 2,
     {input(Slot::src, kFixed, DataType::uint8, 3, E::rows, E::blocks, E::block_bytes),
      output(Slot::dst, kFixed, DataType::float16, "", Rounding::f16, 2, E::rows, E::cols)},
     true},
    {Derivation::dequant_gguf_f32, "dequant_gguf_f32", false, "block type", 14, {BALLAST_GGUF_TYPES_}, false, true,
     2,
     {input(Slot::src, kFixed, DataType::uint8, 3, E::rows, E::blocks, E::block_bytes),
      output(Slot::dst, kFixed, DataType::float32, "", Rounding::exact, 2, E::rows, E::cols)},
     true},
    // Q4_0 / Q4_1 as stored into repack_int4's outputs: the codes moved, not
    // dequantized; per 32-element block (scale, offset) = (d, -8d) or (d, m).
    {Derivation::repack_gguf_int4, "repack_gguf_int4", true, "block type", 2, {DataType::q4_0, DataType::q4_1}, false,
     false, 3,
     {input(Slot::src, kFixed, DataType::uint8, 3, E::rows, E::blocks, E::block_bytes),
      output(Slot::dst, kFixed, DataType::uint32, ".words", Rounding::exact, 2, E::rows, E::words),
      output(Slot::dst2, kFixed, DataType::float16, ".scale_offset", Rounding::f16, 3, E::rows, E::blocks, E::two)},
     true},
    // quant_int8 whose rows' maxima are given (f32 [N] in the scales slot)
    // instead of taken from the rows it reads: a rank holding part of each
    // row quantizes it with the whole row's maximum (the ranks' maxima
    // all-reduced), so its codes and scales are the whole derivation's.
    // The same outputs as quant_int8, under the same suffixes.
    {Derivation::quant_int8_given_max, "quant_int8_given_max", true, "source", 2,
     {DataType::float32, DataType::float16}, false, false, 4,
     {input(Slot::src, kLaunch, kAny, 2, E::rows, E::cols),
      input(Slot::scales, kFixed, DataType::float32, 1, E::rows),
      output(Slot::dst, kFixed, DataType::int8, ".codes", Rounding::int8_code, 2, E::rows, E::cols),
      output(Slot::dst2, kFixed, DataType::float32, ".scales", Rounding::exact, 1, E::rows)}},
    // A strided shard gathered on the device (issue 29): the source is the
    // whole weight's rows in place (registered zero-copy), the output the
    // rank's columns of each, dense. Any element of 1, 2, 4 or 8 bytes; a
    // blocked type's shard is sliced as bytes (uint8, whole blocks).
    {Derivation::slice, "slice", false, "element type", 0, {}, false, false, 2,
     {input(Slot::src, kLaunch, kAny, 2, E::rows, E::src_cols),
      output(Slot::dst, kLaunch, kAny, "", Rounding::exact, 2, E::rows, E::cols)},
     false, true},
};
#undef BALLAST_INT4_INPUTS_
#undef BALLAST_GGUF_TYPES_
// The GGUF kinds' type lists are kGgufBlocks' types, in its order.
constexpr bool lists_gguf_blocks(const Kind& k) {
  if (k.type_count != sizeof(kGgufBlocks) / sizeof(kGgufBlocks[0])) return false;
  for (int i = 0; i < k.type_count; ++i)
    if (k.types[i] != kGgufBlocks[i].type) return false;
  return true;
}
static_assert(kTable[static_cast<int>(Derivation::repack_gguf_int4)].types[0] == kGgufBlocks[3].type &&
                  kTable[static_cast<int>(Derivation::repack_gguf_int4)].types[1] == kGgufBlocks[4].type,
              "repack_gguf_int4 reads Q4_0 and Q4_1, rows of kGgufBlocks");
static_assert(lists_gguf_blocks(kTable[static_cast<int>(Derivation::dequant_gguf)]) &&
                  lists_gguf_blocks(kTable[static_cast<int>(Derivation::dequant_gguf_f32)]),
              "the GGUF kinds read exactly the types of kGgufBlocks");

// True when `rows` has one row per kind, in the enum's order: a backend's
// (or a test's) dispatch table static_asserts it, so a new kind without a
// row there fails to compile.
template <class Row, std::size_t N>
constexpr bool covers_every_kind(const Row (&rows)[N]) {
  if (N != static_cast<std::size_t>(kDerivationCount)) return false;
  for (std::size_t i = 0; i < N; ++i)
    if (static_cast<std::size_t>(rows[i].kind) != i) return false;
  return true;
}
static_assert(covers_every_kind(kTable), "kinds::kTable needs one row per Derivation, in order");

// Every kind's name, in the enum's order, for code that keeps one function
// per kind: a backend's kernels, the tests' reference. It declares its
// functions from this list and builds its dispatch table from the same
// list, so each kind's function is defined beside its kernel, in any file,
// and a kind without one fails to link. (The check below holds the list
// to the enum.)
#define BALLAST_DERIVATION_KINDS(X) \
  X(transpose)                      \
  X(to_f16)                         \
  X(dequant_int4)                   \
  X(repack_int4)                    \
  X(quant_int8)                     \
  X(dequant_gguf)                   \
  X(dequant_gguf_f32)               \
  X(repack_gguf_int4)               \
  X(quant_int8_given_max)           \
  X(slice)

struct ListedKind {
  Derivation kind;
};
#define BALLAST_LISTED_KIND(name) ListedKind{Derivation::name},
constexpr ListedKind kListedKinds[] = {BALLAST_DERIVATION_KINDS(BALLAST_LISTED_KIND)};
#undef BALLAST_LISTED_KIND
static_assert(covers_every_kind(kListedKinds), "BALLAST_DERIVATION_KINDS lists every Derivation, in order");

constexpr bool is_output(Slot s) { return s == Slot::dst || s == Slot::dst2; }

// Whether operand `o` of kind `k` takes part in a launch with these zero
// points. Only the blocked (int4) kinds read the zero-point field; every
// other kind ignores it, as it ignores every field it does not use.
constexpr bool present(const Kind& k, const Operand& o, ZeroPoints z) {
  switch (o.when) {
    case When::always: return true;
    case When::zero_points_packed: return k.blocked && z == ZeroPoints::packed_u4;
    case When::zero_points_unpacked: return k.blocked && z == ZeroPoints::unpacked;
  }
  return false;
}

}  // namespace kinds

// The row of `d` (a valid enumerator: check the raw value first where it
// comes from outside).
constexpr const kinds::Kind& derivation_kind(Derivation d) { return kinds::kTable[static_cast<int>(d)]; }

constexpr bool is_known_derivation(std::uint64_t raw) { return raw < static_cast<std::uint64_t>(kDerivationCount); }

}  // namespace ballast
