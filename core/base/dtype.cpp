#include <ballast/dtype.hpp>

#include <array>

namespace ballast {
namespace {

struct TypeRow {
  std::string_view name;
  unsigned bits;
};

// Indexed by the ONNX type number.
constexpr std::array<TypeRow, kMaxKnownDataType + 1> kTypes = {{
    {"undefined", 0},      {"float", 32},         {"uint8", 8},           {"int8", 8},
    {"uint16", 16},        {"int16", 16},         {"int32", 32},          {"int64", 64},
    {"string", 0},         {"bool", 8},           {"float16", 16},        {"double", 64},
    {"uint32", 32},        {"uint64", 64},        {"complex64", 64},      {"complex128", 128},
    {"bfloat16", 16},      {"float8e4m3fn", 8},   {"float8e4m3fnuz", 8},  {"float8e5m2", 8},
    {"float8e5m2fnuz", 8}, {"uint4", 4},          {"int4", 4},            {"float4e2m1", 4},
    {"float8e8m0", 8},
}};

// The types past ONNX's numbering (data_type.hpp).
struct ExtraType {
  DataType type;
  TypeRow row;
};
constexpr std::array<ExtraType, 2> kExtraTypes = {{
    {DataType::float6e2m3, {"float6e2m3", 6}},
    {DataType::float6e3m2, {"float6e3m2", 6}},
}};

// GGUF's block types (data_type.hpp): elements and bytes of one block, as
// ggml defines them (docs/derivations.md has each layout).
struct BlockType {
  DataType type;
  std::string_view name;
  DtypeBlock block;
};
constexpr std::array<BlockType, 24> kBlockTypes = {{
    {DataType::q4_0, "q4_0", {32, 18}},        {DataType::q4_1, "q4_1", {32, 20}},
    {DataType::q5_0, "q5_0", {32, 22}},        {DataType::q5_1, "q5_1", {32, 24}},
    {DataType::q8_0, "q8_0", {32, 34}},        {DataType::q8_1, "q8_1", {32, 36}},
    {DataType::q2_k, "q2_k", {256, 84}},       {DataType::q3_k, "q3_k", {256, 110}},
    {DataType::q4_k, "q4_k", {256, 144}},      {DataType::q5_k, "q5_k", {256, 176}},
    {DataType::q6_k, "q6_k", {256, 210}},      {DataType::q8_k, "q8_k", {256, 292}},
    {DataType::iq2_xxs, "iq2_xxs", {256, 66}}, {DataType::iq2_xs, "iq2_xs", {256, 74}},
    {DataType::iq3_xxs, "iq3_xxs", {256, 98}}, {DataType::iq1_s, "iq1_s", {256, 50}},
    {DataType::iq4_nl, "iq4_nl", {32, 18}},    {DataType::iq3_s, "iq3_s", {256, 110}},
    {DataType::iq2_s, "iq2_s", {256, 82}},     {DataType::iq4_xs, "iq4_xs", {256, 136}},
    {DataType::iq1_m, "iq1_m", {256, 56}},     {DataType::tq1_0, "tq1_0", {256, 54}},
    {DataType::tq2_0, "tq2_0", {256, 66}},     {DataType::mxfp4, "mxfp4", {32, 17}},
}};

// ggml's type ids as GGUF files write them. The gaps (4, 5, 31-33, 36-38)
// are types the format dropped.
struct GgufType {
  std::uint32_t id;
  std::string_view name;
  DataType type;
};
constexpr std::array<GgufType, 32> kGgufTypes = {{
    {0, "F32", DataType::float32},     {1, "F16", DataType::float16},      {2, "Q4_0", DataType::q4_0},
    {3, "Q4_1", DataType::q4_1},       {6, "Q5_0", DataType::q5_0},        {7, "Q5_1", DataType::q5_1},
    {8, "Q8_0", DataType::q8_0},       {9, "Q8_1", DataType::q8_1},        {10, "Q2_K", DataType::q2_k},
    {11, "Q3_K", DataType::q3_k},      {12, "Q4_K", DataType::q4_k},       {13, "Q5_K", DataType::q5_k},
    {14, "Q6_K", DataType::q6_k},      {15, "Q8_K", DataType::q8_k},       {16, "IQ2_XXS", DataType::iq2_xxs},
    {17, "IQ2_XS", DataType::iq2_xs},  {18, "IQ3_XXS", DataType::iq3_xxs}, {19, "IQ1_S", DataType::iq1_s},
    {20, "IQ4_NL", DataType::iq4_nl},  {21, "IQ3_S", DataType::iq3_s},     {22, "IQ2_S", DataType::iq2_s},
    {23, "IQ4_XS", DataType::iq4_xs},  {24, "I8", DataType::int8},         {25, "I16", DataType::int16},
    {26, "I32", DataType::int32},      {27, "I64", DataType::int64},       {28, "F64", DataType::float64},
    {29, "IQ1_M", DataType::iq1_m},    {30, "BF16", DataType::bfloat16},   {34, "TQ1_0", DataType::tq1_0},
    {35, "TQ2_0", DataType::tq2_0},    {39, "MXFP4", DataType::mxfp4},
}};

const BlockType* block_row_of(DataType t) noexcept {
  for (const BlockType& b : kBlockTypes)
    if (b.type == t) return &b;
  return nullptr;
}

const TypeRow* row_of(DataType t) noexcept {
  const auto raw = static_cast<std::int32_t>(t);
  if (raw >= 0 && raw <= kMaxKnownDataType) return &kTypes[static_cast<std::size_t>(raw)];
  for (const ExtraType& extra : kExtraTypes)
    if (extra.type == t) return &extra.row;
  return nullptr;
}

}  // namespace

bool is_known_dtype(std::int32_t raw) noexcept { return raw >= 0 && raw <= kMaxKnownDataType; }

std::string_view dtype_name(DataType t) noexcept {
  if (const TypeRow* row = row_of(t)) return row->name;
  if (const BlockType* b = block_row_of(t)) return b->name;
  return "unknown";
}

std::optional<DataType> dtype_from_name(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kTypes.size(); ++i) {
    if (kTypes[i].name == name) return static_cast<DataType>(i);
  }
  for (const ExtraType& extra : kExtraTypes)
    if (extra.row.name == name) return extra.type;
  for (const BlockType& b : kBlockTypes)
    if (b.name == name) return b.type;
  return std::nullopt;
}

std::optional<DataType> dtype_from_gguf_type(std::uint32_t id) noexcept {
  for (const GgufType& g : kGgufTypes)
    if (g.id == id) return g.type;
  return std::nullopt;
}

std::string_view dtype_gguf_name(DataType t) noexcept {
  for (const GgufType& g : kGgufTypes)
    if (g.type == t) return g.name;
  return {};
}

std::optional<DtypeBlock> dtype_block(DataType t) noexcept {
  const BlockType* b = block_row_of(t);
  if (b == nullptr) return std::nullopt;
  return b->block;
}

unsigned dtype_bits(DataType t) noexcept {
  const TypeRow* row = row_of(t);
  return row != nullptr ? row->bits : 0;
}

std::optional<std::uint64_t> dtype_storage_bytes(DataType t, std::uint64_t elements) noexcept {
  if (const BlockType* b = block_row_of(t)) {
    if (elements % b->block.elements != 0) return std::nullopt;
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(elements / b->block.elements, std::uint64_t{b->block.bytes}, &bytes)) return std::nullopt;
    return bytes;
  }
  const unsigned bits = dtype_bits(t);
  if (bits == 0) return std::nullopt;
  if (bits % 8 == 0) {
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(elements, std::uint64_t{bits / 8}, &bytes)) return std::nullopt;
    return bytes;
  }
  // Sub-byte: elements x bits, rounded up to whole bytes, without forming
  // the bit count (it overflows long before the byte count does).
  const std::uint64_t whole = elements / 8 * bits;  // bytes of the full groups of 8
  const std::uint64_t rest = (elements % 8 * bits + 7) / 8;
  std::uint64_t bytes = 0;
  if (elements / 8 > UINT64_MAX / bits || __builtin_add_overflow(whole, rest, &bytes)) return std::nullopt;
  return bytes;
}

std::optional<std::uint64_t> element_count(std::span<const std::int64_t> dims) noexcept {
  // Overflow checked by the multiply itself: a division per dim (the
  // obvious check) costs more than the rest of a small tensor's decoding.
  std::uint64_t n = 1;
  for (std::int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return std::nullopt;
  }
  return n;
}

}  // namespace ballast
